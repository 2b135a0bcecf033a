/* examples/embed.c - a program that embeds ferry (docs/embedding.md).
 *
 *   embed PIPELINE.yaml STATE.db [--cancel-after N | --pause-after N]
 *
 * Loads the pipeline file's text, runs it with an event callback and, for a
 * `sink: {type: callback}`, receives every batch through the Arrow C Data Interface and
 * prints its rows on stdout, one line per row, tab-separated: integers and floats as C
 * prints them (%.17g), text with backslash, tab, newline and carriage return escaped as
 * \\, \t, \n and \r, binary and fixed-size binary as lower-case hex, dates as days,
 * times and timestamps as microseconds, decimals with their point, NULL as \N. Events go
 * to stderr ("event TYPE RESOURCE"), then one summary line "result STATE rows=N run=ID".
 * --cancel-after N (--pause-after N): once N batches arrived, another thread calls
 * ferry_job_cancel (ferry_job_pause); the batch callback waits until it has. Exit status:
 * 0 completed, 3 canceled, 4 paused, 1 otherwise.
 *
 * Build against an installed ferry:
 *   cc -o embed embed.c $(pkg-config --cflags --libs ferry) -lpthread
 * or see examples/Makefile (shared and static). */
#include <ferry/ferry.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct app {
    long stop_after; /* 0: never */
    bool pause;      /* pause instead of cancel */
    long batches;
    int64_t rows;
    struct ferry_job *job;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int cancel_state; /* 0 idle, 1 asked, 2 done, 3 quit */
};

static bool is_null(const struct ArrowArray *a, int64_t i)
{
    const uint8_t *valid = a->buffers[0];
    int64_t j = a->offset + i;
    return valid != NULL && !(valid[j / 8] >> (j % 8) & 1);
}

static void print_hex(const uint8_t *p, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        printf("%02x", p[k]);
}

static void print_text(const uint8_t *p, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        const char *esc = p[k] == '\\'   ? "\\\\"
                          : p[k] == '\t' ? "\\t"
                          : p[k] == '\n' ? "\\n"
                          : p[k] == '\r' ? "\\r"
                                         : NULL;
        if (esc)
            fputs(esc, stdout);
        else
            putchar(p[k]);
    }
}

/* A decimal128 (little-endian two's complement) with `scale` digits after the point. */
static void print_decimal(const uint8_t *p, int scale)
{
    __int128 v;
    memcpy(&v, p, sizeof v);
    char digits[48];
    int n = 0;
    unsigned __int128 u = v < 0 ? -(unsigned __int128)v : (unsigned __int128)v;
    do {
        digits[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u != 0 || n <= scale);
    if (v < 0) putchar('-');
    for (int k = n - 1; k >= 0; k--) {
        putchar(digits[k]);
        if (k == scale && k > 0) putchar('.');
    }
}

/* One value of column a (format fmt) at row i. */
static void print_value(const char *fmt, const struct ArrowArray *a, int64_t i)
{
    int64_t j = a->offset + i;
    const void *v = a->buffers[1];
    if (is_null(a, i))
        fputs("\\N", stdout);
    else if (!strcmp(fmt, "b"))
        fputs(((const uint8_t *)v)[j / 8] >> (j % 8) & 1 ? "true" : "false", stdout);
    else if (!strcmp(fmt, "c"))
        printf("%d", ((const int8_t *)v)[j]);
    else if (!strcmp(fmt, "s"))
        printf("%d", ((const int16_t *)v)[j]);
    else if (!strcmp(fmt, "i") || !strcmp(fmt, "tdD"))
        printf("%" PRId32, ((const int32_t *)v)[j]);
    else if (!strcmp(fmt, "l") || !strncmp(fmt, "ts", 2) || !strcmp(fmt, "ttu"))
        printf("%" PRId64, ((const int64_t *)v)[j]);
    else if (!strcmp(fmt, "f"))
        printf("%.9g", (double)((const float *)v)[j]);
    else if (!strcmp(fmt, "g"))
        printf("%.17g", ((const double *)v)[j]);
    else if (!strcmp(fmt, "u") || !strcmp(fmt, "z")) {
        const int32_t *off = v;
        const uint8_t *data = a->buffers[2];
        if (fmt[0] == 'u')
            print_text(data + off[j], off[j + 1] - off[j]);
        else
            print_hex(data + off[j], off[j + 1] - off[j]);
    } else if (!strncmp(fmt, "w:", 2)) {
        int w = (int)strtol(fmt + 2, NULL, 10);
        print_hex((const uint8_t *)v + j * w, w);
    } else if (!strncmp(fmt, "d:", 2)) {
        const char *comma = strchr(fmt, ',');
        print_decimal((const uint8_t *)v + j * 16, comma ? (int)strtol(comma + 1, NULL, 10) : 0);
    } else
        printf("?%s", fmt);
}

/* Waits until the other thread has asked the run to stop. */
static void stop_now(struct app *app)
{
    pthread_mutex_lock(&app->lock);
    app->cancel_state = 1;
    pthread_cond_broadcast(&app->cond);
    while (app->cancel_state != 2)
        pthread_cond_wait(&app->cond, &app->lock);
    pthread_mutex_unlock(&app->lock);
}

static int on_batch(void *ctx, const struct ferry_batch_info *b, struct ArrowSchema *schema,
                    struct ArrowArray *array)
{
    struct app *app = ctx;
    for (int64_t i = 0; i < array->length; i++) {
        for (int64_t c = 0; c < array->n_children; c++) {
            if (c > 0) putchar('\t');
            print_value(schema->children[c]->format, array->children[c], i);
        }
        putchar('\n');
    }
    app->rows += b->rows;
    schema->release(schema);
    array->release(array);
    if (++app->batches == app->stop_after) stop_now(app);
    return 0;
}

static void on_event(void *ctx, const struct ferry_event_info *ev)
{
    (void)ctx;
    fprintf(stderr, "event %s %s\n", ev->type, ev->resource);
}

/* The other thread: stops the run when asked, or quits. */
static void *stopper(void *arg)
{
    struct app *app = arg;
    pthread_mutex_lock(&app->lock);
    while (app->cancel_state == 0)
        pthread_cond_wait(&app->cond, &app->lock);
    if (app->cancel_state == 1) {
        if (app->pause)
            ferry_job_pause(app->job);
        else
            ferry_job_cancel(app->job);
        app->cancel_state = 2;
        pthread_cond_broadcast(&app->cond);
    }
    pthread_mutex_unlock(&app->lock);
    return NULL;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *text = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap) {
            char *more = realloc(text, cap = cap * 2 + 4096);
            if (more == NULL) break;
            text = more;
        }
        size_t n = fread(text + *len, 1, cap - *len, f);
        *len += n;
        if (n == 0) break;
    }
    fclose(f);
    return text;
}

static int run(struct app *app, const char *state_path)
{
    struct ferry_job_options o = {
        .state_path = state_path, .on_event = on_event, .on_batch = on_batch, .ctx = app};
    struct ferry_job_result res;
    struct ferry_status st;
    pthread_t t;
    pthread_create(&t, NULL, stopper, app);
    int rc = ferry_job_run(app->job, &o, &res, &st);
    pthread_mutex_lock(&app->lock);
    if (app->cancel_state == 0) app->cancel_state = 3;
    pthread_cond_broadcast(&app->cond);
    pthread_mutex_unlock(&app->lock);
    pthread_join(t, NULL);
    fflush(stdout);
    if (rc != 0) fprintf(stderr, "error %s: %s\n", st.code_name, st.message);
    fprintf(stderr, "result %s rows=%" PRId64 " run=%" PRId64 " resumed=%d\n", res.state, app->rows,
            res.run_id, res.resumed);
    return rc == 0 ? 0 : !strcmp(res.state, "canceled") ? 3 : !strcmp(res.state, "paused") ? 4 : 1;
}

int main(int argc, char **argv)
{
    struct app app = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    if (argc == 5 && !strcmp(argv[3], "--cancel-after"))
        app.stop_after = strtol(argv[4], NULL, 10);
    else if (argc == 5 && !strcmp(argv[3], "--pause-after")) {
        app.stop_after = strtol(argv[4], NULL, 10);
        app.pause = true;
    } else if (argc != 3) {
        fprintf(stderr,
                "usage: embed PIPELINE.yaml STATE.db [--cancel-after N | --pause-after N]\n");
        return 2;
    }
    size_t len;
    char *yaml = read_file(argv[1], &len);
    if (yaml == NULL) {
        fprintf(stderr, "embed: cannot read %s\n", argv[1]);
        return 1;
    }
    struct ferry_status st;
    int rc = ferry_job_load(yaml, len, argv[1], &app.job, &st);
    free(yaml);
    if (rc != 0) {
        fprintf(stderr, "error %s: %s\n", st.code_name, st.message);
        return 1;
    }
    fprintf(stderr, "ferry %s, pipeline %s\n", ferry_library_version(), ferry_job_name(app.job));
    rc = run(&app, argv[2]);
    ferry_job_free(app.job);
    return rc;
}
