/* ferry/ferry.h - ferry as a library: the embedding API (docs/embedding.md).
 *
 * This is the one header `cmake --install` puts under PREFIX/include/ferry/; compile with
 * `pkg-config --cflags --libs ferry` (or `--static`). It is self-contained and stable:
 * the other headers of the source tree's include/ferry/ are the engine's own interfaces
 * and are not installed.
 *
 *   struct ferry_job *job;
 *   struct ferry_status st;
 *   if (ferry_job_load(yaml, strlen(yaml), "mine", &job, &st) != 0) die(st.message);
 *   struct ferry_job_options o = {.state_path = "state.db", .on_batch = take, .ctx = me};
 *   struct ferry_job_result res;
 *   int rc = ferry_job_run(job, &o, &res, &st);   // blocks; ferry_job_cancel() stops it
 *   ferry_job_free(job);
 *
 * Contract:
 *   - A job is a pipeline file's text, loaded and checked (ferry_job_load). Running it
 *     (ferry_job_run) is a run of that pipeline exactly as `ferry run` makes one: it opens
 *     the state file, resumes what an earlier run left unfinished, saves checkpoints only
 *     once the sink made the data durable, and records the run for `ferry show`.
 *   - Several jobs may run at once, each ferry_job_run on its own thread: every run has its
 *     own stop request, callbacks and checkpoints. A job runs once at a time, and a state
 *     file holds one run of a pipeline at a time: a ferry_job_run of the same job, or of
 *     the same pipeline `name:` and state file, while one is in progress fails with
 *     code_name "conflict" and runs nothing.
 *   - ferry_job_cancel and ferry_job_pause may be called from any thread at any time while
 *     the job exists: the job's run - and no other - stops as soon as it can (below). A
 *     request made while the job is not running applies to its next ferry_job_run, which
 *     then returns at once without starting a run; a run's end clears the request.
 *   - Callbacks run on the engine's threads, never two of one job at once (each kind is
 *     serialised per job; two jobs running at once call theirs at the same time). They
 *     must not call ferry_job_run or ferry_job_free of their own job; ferry_job_cancel and
 *     ferry_job_pause are allowed.
 *   - `sink: {type: callback}` hands every batch to on_batch through the Arrow C Data
 *     Interface (https://arrow.apache.org/docs/format/CDataInterface.html): the callee owns
 *     the schema and the array it receives and must call each one's release (at once or
 *     later, on any thread). The batch counts as delivered - durable - when on_batch returns
 *     0; any other value fails the run naming the resource and batch.
 *   - Every function reports failure as a non-zero return and fills *status (when given)
 *     with the engine's code, its stable name and a message naming what failed.
 *   - Only symbols starting with `ferry_` are exported; ABI changes bump FERRY_API_VERSION. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#define FERRY_API_VERSION 2 /* 2: ferry_job_result.converted, ferry_job_converted */

/* The Arrow C Data Interface structures, as the specification declares them (under its
 * own guard, so a program that already has them compiles once). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* What failed. code: 0 on success, else the engine's error code (docs/cli.md lists them
 * with their names); code_name: its stable lower-case name ("config", "canceled", "sink",
 * ...); message: one line naming the key, resource, table, column, file or host. */
struct ferry_status {
    int code;
    char code_name[24];
    char message[1024];
};

/* One event of the run (the catalog: docs/embedding.md#events). Valid during the call only. */
struct ferry_event_info {
    int64_t seq;     /* increasing within the state file's event log */
    int64_t time_us; /* wall clock, microseconds since 1970 */
    int64_t run_id;
    int attempt;
    const char *resource; /* "" when not about one resource */
    const char *type;     /* "run.started", "batch.written", "run.completed", ... */
    const char *payload;  /* a JSON object */
};

/* One batch a `callback` sink delivers. Valid during the call only. */
struct ferry_batch_info {
    const char *resource; /* the source resource ("orders", "public.orders") */
    const char *table;    /* its destination name (`target:`, else the table's last part) */
    int64_t seq;          /* 1, 2, 3... per resource within a run */
    int64_t rows;         /* == array->length */
};

typedef void (*ferry_event_fn)(void *ctx, const struct ferry_event_info *ev);
/* Owns *schema and *array (call their release). 0: delivered; else the run fails. */
typedef int (*ferry_batch_fn)(void *ctx, const struct ferry_batch_info *batch,
                              struct ArrowSchema *schema, struct ArrowArray *array);

struct ferry_job_options {
    const char *state_path;  /* required: the SQLite state file (created when missing) */
    bool fresh;              /* never resume an unfinished run of this pipeline */
    ferry_event_fn on_event; /* optional: every event the run publishes */
    ferry_batch_fn on_batch; /* required when the sink is `callback`, refused otherwise */
    void *ctx;               /* passed to both */
};

struct ferry_job_result {
    int64_t run_id;
    int attempt;
    bool resumed;   /* this run continued an unfinished one */
    char state[16]; /* completed | partial | paused | canceled | failed */
    int64_t rows, bytes, batches;
    double seconds;
    /* Values `on_unrepresentable: null | clamp` converted in this run (every attempt of it),
     * every column; ferry_job_converted lists them per column. 0: every value is exact. */
    int64_t converted;
};

/* One column in which `on_unrepresentable` converted values (docs/embedding.md). */
struct ferry_converted {
    const char *resource; /* as the pipeline names it */
    const char *column;
    int64_t to_null;      /* replaced by NULL */
    int64_t clamped;      /* replaced by the nearest value the sink holds */
};

struct ferry_job;

/* "0.1.0": the library's version. */
FERRY_API const char *ferry_library_version(void);

/* Loads and checks a pipeline file's text (YAML, docs/pipeline-file.md); `name` names it in
 * messages (e.g. the file it came from; NULL: "pipeline"). Connector sections are checked
 * when the job runs. *out is freed with ferry_job_free. */
FERRY_API int ferry_job_load(const char *yaml, size_t len, const char *name, struct ferry_job **out,
                             struct ferry_status *status);

/* The pipeline's `name:` and version hash (64 hex digits); valid while the job exists. */
FERRY_API const char *ferry_job_name(const struct ferry_job *job);
FERRY_API const char *ferry_job_version(const struct ferry_job *job);

/* Runs the job on the calling thread until the run ends. Returns 0 when it completed
 * (res->state "completed" or "partial"), else the code of why not (status->code_name
 * "canceled", "paused", or what failed); *res (optional) is filled either way. */
FERRY_API int ferry_job_run(struct ferry_job *job, const struct ferry_job_options *opts,
                            struct ferry_job_result *res, struct ferry_status *status);

/* The columns of the job's last run (ferry_job_run) in which values were converted, by
 * resource then column: returns how many and sets *out (NULL when none) to an array the
 * job owns, valid until its next ferry_job_run or ferry_job_free. Their sum is
 * res->converted. Not while the job runs. */
FERRY_API int ferry_job_converted(const struct ferry_job *job, const struct ferry_converted **out);

/* Any thread, never blocks: ask the job's run to stop (see the contract above).
 * Cancel: the run ends "canceled"; batches already delivered stay delivered, the run is
 * final and the next run of the pipeline starts its work again. Pause: extraction stops,
 * what was read is delivered, the checkpoints are saved and the run ends "paused"; the next
 * ferry_job_run of the same pipeline and state file resumes it (res->resumed). */
FERRY_API void ferry_job_cancel(struct ferry_job *job);
FERRY_API void ferry_job_pause(struct ferry_job *job);

/* Frees the job; NULL is allowed. Not while it runs. */
FERRY_API void ferry_job_free(struct ferry_job *job);

#ifdef __cplusplus
}
#endif
#endif
