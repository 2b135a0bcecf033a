/* tests/unit/test_mysql.c - the pure parts of the mysql connectors (my_common.h): the
 * connection URL (percent-decoding, ports, IPv6, the socket parameter, every refusal
 * without showing the value), identifier quoting (backquotes doubled, the 64-character
 * limit counted in characters, not bytes) and `db.table` names with backquoted parts; and
 * that the Connector/C ferry links loads the client side of MySQL 8's default
 * authentication, caching_sha2_password (and sha256_password), which MariaDB's server has
 * not: no server here can exercise it. */
#include <stdio.h>
#include <string.h>
#include "unit.h"
#include "connectors/mysql/my_common.h"
#include "ferry/error.h"

/* mysql/client_plugin.h's value (that header needs one Debian does not ship) */
#define AUTH_PLUGIN 2

static void parse_ok(const char *url, const char *host, unsigned port, const char *user,
                     const char *pw, const char *db, const char *sock)
{
    struct ferry_my_conn c;
    memset(&c, 0, sizeof c);
    struct ferry_error err;
    assert_int_equal(ferry__my_parse_url(url, &c, &err), FERRY_OK);
    assert_string_equal(c.host, host);
    assert_int_equal(c.port, port);
    if (user)
        assert_string_equal(c.user, user);
    else
        assert_null(c.user);
    if (pw)
        assert_string_equal(c.password, pw);
    else
        assert_null(c.password);
    assert_string_equal(c.db, db);
    if (sock)
        assert_string_equal(c.socket, sock);
    else
        assert_null(c.socket);
    ferry__my_conn_free(&c);
}

static void parse_bad(const char *url, const char *why)
{
    struct ferry_my_conn c;
    memset(&c, 0, sizeof c);
    struct ferry_error err;
    assert_int_equal(ferry__my_parse_url(url, &c, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, why));
    /* The secret part of the value never appears in the message. */
    assert_null(strstr(err.message, "s3cret"));
    ferry__my_conn_free(&c);
}

static void test_url(void **state)
{
    (void)state;
    parse_ok("mysql://u:s3cret@db.example:3307/shop", "db.example", 3307, "u", "s3cret", "shop",
             NULL);
    parse_ok("mariadb://u@127.0.0.1/shop", "127.0.0.1", 3306, "u", NULL, "shop", NULL);
    parse_ok("mysql://r%40x:p%3Aw%2F%25@h/my%20db", "h", 3306, "r@x", "p:w/%", "my db", NULL);
    parse_ok("mysql://u:pw@[::1]:3310/d", "::1", 3310, "u", "pw", "d", NULL);
    parse_ok("mysql://u:pw@/d?socket=/tmp/my%20sock", "", 3306, "u", "pw", "d", "/tmp/my sock");
    parse_ok("mysql://h/d", "h", 3306, NULL, NULL, "d", NULL);
    parse_bad("postgres://u:s3cret@h/d", "scheme");
    parse_bad("mysql://u:s3cret@h:99999/d", "bad port");
    parse_bad("mysql://u:s3cret@h:/d", "bad port");
    parse_bad("mysql://u:s3cret@h", "no database");
    parse_bad("mysql://u:s3cret%zz@h/d", "percent-encoding");
    parse_bad("mysql://u:s3cret%00@h/d", "percent-encoding");
    parse_bad("mysql://u:s3cret@h/d?ssl=1", "unknown query parameter");
    parse_bad("mysql://u:s3cret@[::1/d", "unclosed");
}

static void quoted(const char *name, const char *want)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    struct ferry_error err;
    assert_int_equal(ferry__my_quote_ident(&b, name, &err), FERRY_OK);
    assert_string_equal(b.data, want);
    ferry_buf_release(&b);
}

static void test_quote(void **state)
{
    (void)state;
    quoted("orders", "`orders`");
    quoted("we\"ird `t`; drop", "`we\"ird ``t``; drop`");
    quoted("``", "``````");
    char name[300];
    memset(name, 'x', 64);
    name[64] = '\0';
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    struct ferry_error err;
    assert_int_equal(ferry__my_quote_ident(&b, name, &err), FERRY_OK);
    name[64] = 'x';
    name[65] = '\0';
    assert_int_equal(ferry__my_quote_ident(&b, name, &err), FERRY_ECONFIG);
    assert_non_null(strstr(err.message, "longer than 64"));
    /* 64 two-byte characters are 64 characters. */
    name[0] = '\0';
    for (int i = 0; i < 64; i++)
        strcat(name, "\xc3\xa9");
    assert_int_equal(ferry__my_quote_ident(&b, name, &err), FERRY_OK);
    assert_int_equal(ferry__my_quote_ident(&b, "", &err), FERRY_ECONFIG);
    ferry_buf_release(&b);
}

static void split_ok(const char *in, const char *db, const char *table)
{
    char *d = NULL, *t = NULL;
    struct ferry_error err;
    assert_int_equal(ferry__my_split_name(in, &d, &t, &err), FERRY_OK);
    if (db)
        assert_string_equal(d, db);
    else
        assert_null(d);
    assert_string_equal(t, table);
    ferry_free(d);
    ferry_free(t);
}

static void test_split(void **state)
{
    (void)state;
    split_ok("orders", NULL, "orders");
    split_ok("shop.orders", "shop", "orders");
    split_ok("`my db`.`t.x`", "my db", "t.x");
    split_ok("`we\"ird ``t``; drop`", NULL, "we\"ird `t`; drop");
    split_ok("shop.`a``b`", "shop", "a`b");
    /* a name listed for a `tables:` pattern comes back double-quoted (ferry_table_qualified) */
    split_ok("\"My Db\".\"we\"\"ird `t`\"", "My Db", "we\"ird `t`");
    split_ok("shop.\"Orders\"", "shop", "Orders");
    char *d = NULL, *t = NULL;
    struct ferry_error err;
    assert_int_equal(ferry__my_split_name("a.b.c", &d, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__my_split_name("`open", &d, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__my_split_name("\"open", &d, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__my_split_name(".t", &d, &t, &err), FERRY_ECONFIG);
    assert_int_equal(ferry__my_split_name("db.", &d, &t, &err), FERRY_ECONFIG);
    assert_null(d);
    assert_null(t);
}

static void test_auth_plugins(void **state)
{
    (void)state;
    MYSQL *m = mysql_init(NULL);
    assert_non_null(m);
    assert_non_null(mysql_client_find_plugin(m, "caching_sha2_password", AUTH_PLUGIN));
    assert_non_null(mysql_client_find_plugin(m, "sha256_password", AUTH_PLUGIN));
    assert_null(mysql_client_find_plugin(m, "no_such_plugin", AUTH_PLUGIN));
    mysql_close(m);
    mysql_library_end();
}

/* The log end's statement: SHOW MASTER STATUS, then SHOW BINARY LOG STATUS only after the
 * syntax error of MySQL 8.4 (which removed the first); other errors are not retried. */
static void test_log_status_sql(void **state)
{
    (void)state;
    const char *first = ferry__my_log_status_sql(NULL, 0);
    assert_string_equal(first, "SHOW MASTER STATUS");
    assert_string_equal(ferry__my_log_status_sql(first, 1064), "SHOW BINARY LOG STATUS");
    assert_null(ferry__my_log_status_sql(first, 1227)); /* access denied: said as is */
    assert_null(ferry__my_log_status_sql(first, 2013)); /* connection lost */
    assert_null(ferry__my_log_status_sql("SHOW BINARY LOG STATUS", 1064));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url),
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_auth_plugins),
        cmocka_unit_test(test_log_status_sql),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
