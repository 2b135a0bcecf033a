/* tests/fuzz/fuzz_csv.c - the files connector's CSV reader (src/formats/text_read.c)
 * on arbitrary bytes, through its input layer (plain, gzip and zstd are recognised by magic
 * bytes, so compressed inputs are fuzzed too). The first byte picks the dialect: delimiter,
 * quote, escape and null marker. Every record's fields are read back. */
#include "formats/text.h"
#include "fuzz.h"

#define MAX_RECORDS 100000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t pick = data[0];
    struct ferry__files_csv_opts o = {
        .delimiter = (pick & 3) == 0 ? ',' : (pick & 3) == 1 ? ';' : (pick & 3) == 2 ? '\t' : '|',
        .quote = (pick & 4) ? '"' : (pick & 8) ? '\'' : 0,
        .escape = (pick & 16) ? '\\' : 0,
        .null_marker = (pick & 32) ? "NULL" : (pick & 64) ? "\\N" : "",
    };
    char path[64];
    if (fuzz_memfile(data + 1, size - 1, path, sizeof path) != 0) return 0;
    struct ferry__files_input *in = NULL;
    struct ferry_error err;
    if (ferry__files_input_open(path, &in, &err) != 0) return 0;
    struct ferry__files_reader *r = ferry__files_reader_new(FILES_FMT_CSV, &o, in, "fuzz.csv");
    if (r != NULL) {
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
                total += strlen(ferry__files_reader_text(r, fd)) + fd->len;
            }
            (void)total;
            (void)ferry__files_reader_offset(r);
            (void)ferry__files_reader_line(r);
        }
        ferry__files_reader_free(r);
    }
    ferry__files_input_close(in);
    return 0;
}
