/* tests/fuzz/fuzz_jsonl.c - the files connector's JSON Lines reader
 * (src/formats/text_read.c) on arbitrary bytes, through its input layer. The first
 * byte picks the mode: inference (every key collected, as schema discovery does) or
 * extraction of a fixed key list (as the source reads rows). */
#include "formats/text.h"
#include "fuzz.h"

#define MAX_RECORDS 100000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const char *const keys[] = {"id", "name", "v", "nested", "a.b", ""};
    bool infer = data[0] & 1;
    char path[64];
    if (fuzz_memfile(data + 1, size - 1, path, sizeof path) != 0) return 0;
    struct ferry__files_input *in = NULL;
    struct ferry_error err;
    if (ferry__files_input_open(path, &in, &err) != 0) return 0;
    struct ferry__files_reader *r = ferry__files_reader_new(FILES_FMT_JSONL, NULL, in, "fuzz.jsonl");
    if (r != NULL) {
        ferry__files_reader_set_keys(r, keys, infer ? 0 : 6);
        int errors = 0;
        for (int i = 0; i < MAX_RECORDS; i++) {
            bool eof = false;
            int64_t at = ferry__files_reader_offset(r);
            int rc = ferry__files_reader_next(r, &eof, &err);
            if (eof) break;
            /* a parse error leaves the reader at the next record; an error that did not move
             * it (a broken compressed stream) would repeat forever */
            if (rc != 0 && ferry__files_reader_offset(r) == at) break;
            if (rc != 0) {
                if (++errors > 1000 || rc != FERRY_EINVAL) break;
                continue;
            }
            int n = ferry__files_reader_nfields(r);
            size_t total = 0;
            for (int f = 0; f < n; f++) {
                const struct ferry__files_field *fd = ferry__files_reader_field(r, f);
                total += strlen(ferry__files_reader_text(r, fd)) + fd->len + (size_t)fd->kind;
            }
            (void)total;
        }
        ferry__files_reader_free(r);
    }
    ferry__files_input_close(in);
    return 0;
}
