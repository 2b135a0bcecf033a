/* tests/unit/test_s3_sigv4.c - the s3 sink's Signature V4 signer against the examples AWS
 * publishes in its S3 SigV4 documentation (access key AKIAIOSFODNN7EXAMPLE, secret
 * wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, 2013-05-24, us-east-1), and the URI encoding. */
#include "unit.h"
#include <string.h>
#include "objstore/sigv4.h"

#define AKID "AKIAIOSFODNN7EXAMPLE"
#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void sign(const char *method, const char *uri, const char *query,
                 const struct ferry__s3_header *h, int n, const char *payload, const char *want_sig,
                 const char *want_canonical)
{
    struct ferry__s3_sign r = {method,      uri,  query, h,     n, payload, "20130524T000000Z",
                               "us-east-1", "s3", AKID,  SECRET};
    struct ferry_buf auth, canon;
    ferry_buf_init(&auth, 0);
    ferry_buf_init(&canon, 0);
    struct ferry_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(ferry__s3_sigv4(&r, &auth, &canon, &err), FERRY_OK);
    if (want_canonical) assert_string_equal(canon.data, want_canonical);
    const char *sig = strstr(auth.data, "Signature=");
    assert_non_null(sig);
    assert_string_equal(sig + 10, want_sig);
    assert_non_null(strstr(auth.data, "Credential=" AKID "/20130524/us-east-1/s3/aws4_request, "));
    assert_null(strstr(auth.data, SECRET));
    assert_null(strstr(canon.data, SECRET));
    ferry_buf_release(&auth);
    ferry_buf_release(&canon);
}

/* AWS's "GET Object" example: a Range request for the first 10 bytes of test.txt. The
 * headers are given out of order: the signer sorts them. */
static void test_get_object_example(void **state)
{
    (void)state;
    struct ferry__s3_header h[] = {
        {"x-amz-date", "20130524T000000Z"},
        {"range", "bytes=0-9"},
        {"host", "examplebucket.s3.amazonaws.com"},
        {"x-amz-content-sha256", EMPTY_SHA},
    };
    sign("GET", "/test.txt", "", h, 4, EMPTY_SHA,
         "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
         "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
         "x-amz-content-sha256:" EMPTY_SHA "\nx-amz-date:20130524T000000Z\n\n"
         "host;range;x-amz-content-sha256;x-amz-date\n" EMPTY_SHA);
    /* One changed byte of the secret changes the signature. */
    struct ferry__s3_sign r = {"GET",
                               "/test.txt",
                               "",
                               h,
                               4,
                               EMPTY_SHA,
                               "20130524T000000Z",
                               "us-east-1",
                               "s3",
                               AKID,
                               "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ"};
    struct ferry_buf auth;
    ferry_buf_init(&auth, 0);
    struct ferry_error err;
    assert_int_equal(ferry__s3_sigv4(&r, &auth, NULL, &err), FERRY_OK);
    assert_null(
        strstr(auth.data, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
    ferry_buf_release(&auth);
}

/* AWS's "PUT Object" example: "Welcome to Amazon S3." to test$file.text (an encoded '$'). */
static void test_put_object_example(void **state)
{
    (void)state;
    struct ferry_buf uri;
    ferry_buf_init(&uri, 0);
    assert_int_equal(ferry_buf_append(&uri, "/", 1), FERRY_OK);
    assert_int_equal(ferry__s3_uri_encode(&uri, "test$file.text", true), FERRY_OK);
    assert_string_equal(uri.data, "/test%24file.text");
    char payload[65];
    ferry_sha256_hex("Welcome to Amazon S3.", 21, payload);
    assert_string_equal(payload,
                        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    struct ferry__s3_header h[] = {
        {"date", "Fri, 24 May 2013 00:00:00 GMT"},
        {"host", "examplebucket.s3.amazonaws.com"},
        {"x-amz-content-sha256", payload},
        {"x-amz-date", "20130524T000000Z"},
        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
    };
    sign("PUT", uri.data, "", h, 5, payload,
         "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd", NULL);
    ferry_buf_release(&uri);
}

/* AWS's "GET Bucket (List Objects)" example: a query string max-keys=2&prefix=J. */
static void test_list_objects_example(void **state)
{
    (void)state;
    struct ferry__s3_header h[] = {
        {"host", "examplebucket.s3.amazonaws.com"},
        {"x-amz-content-sha256", EMPTY_SHA},
        {"x-amz-date", "20130524T000000Z"},
    };
    sign("GET", "/", "max-keys=2&prefix=J", h, 3, EMPTY_SHA,
         "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7", NULL);
}

static void test_uri_encode(void **state)
{
    (void)state;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    assert_int_equal(ferry__s3_uri_encode(&b, "raw/t 1/run=7/a~b_c-d.e+f\xc3\xa9", true), FERRY_OK);
    assert_string_equal(b.data, "raw/t%201/run%3D7/a~b_c-d.e%2Bf%C3%A9");
    ferry_buf_reset(&b);
    assert_int_equal(ferry__s3_uri_encode(&b, "a/b", false), FERRY_OK);
    assert_string_equal(b.data, "a%2Fb");
    ferry_buf_release(&b);
    char hex[7];
    ferry__s3_hex((const uint8_t *)"\x00\xab\xff", 3, hex);
    assert_string_equal(hex, "00abff");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_object_example),
        cmocka_unit_test(test_put_object_example),
        cmocka_unit_test(test_list_objects_example),
        cmocka_unit_test(test_uri_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
