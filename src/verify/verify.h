/* verify/verify.h - `ferry verify`: compare a destination with its source, chunk by chunk.
 *
 * Private to the engine (the CLI and the runner call it). docs/internals/verify.md has the
 * design: the 64-bit row hash (PostgreSQL's own per-type hash functions, seeded by column
 * position, XORed and mixed once more; the same lookup3 in C for SQLite), the chunk digest
 * (row count, sum of row hashes mod 2^64), key-range chunks
 * split 16-way while they differ, row-by-row comparison at the leaves, and the backends
 * that compute digests inside PostgreSQL (SQL) and SQLite (a C function).
 *
 * Not thread-safe: one verification per call, on the calling thread. */
#ifndef FERRY_VERIFY_VERIFY_H
#define FERRY_VERIFY_VERIFY_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/batch.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"

/* ---- values and row hashes (canon.c) ------------------------------------------------- */

/* One value as the hash takes it. Which member is read depends on the type:
 * i for ints (int64), bool (0/1), date32 (days since 1970), time64 (microseconds),
 * timestamps (microseconds since 1970, UTC); f for floats; p/n for var-width values and
 * decimal text; u for uuid. */
struct ferry_vvalue {
    bool null;
    int64_t i;
    double f;
    const uint8_t *p;
    size_t n;
    uint8_t u[16];
};

/* The hash of one value of type t in compared column `pos` (1, 2, ... in destination
 * order; the column's hash seed), equal to what PostgreSQL's hash functions return for it
 * (connectors/postgres/pg_verify.c): hashint8extended for ints, bools (0/1), dates (days since 2000-01-01),
 * times and timestamps (microseconds, since 2000-01-01 UTC); hashfloat8extended /
 * hashfloat4extended for floats, except that -0 hashes to seed ^ 1 (PostgreSQL hashes
 * both zeros to the seed); uuid_hash_extended; hashtextextended of the UTF-8 text for text,
 * json and decimals (decimal128 given as its text with `scale` digits) and of the
 * lowercase hex for binary. A NULL hashes to ferry__vcanon_null_hash(pos). `scratch`
 * holds binary's hex (no allocation once it is large enough). */
int64_t ferry__vcanon_value_hash(enum ferry_type t, int pos, const struct ferry_vvalue *v,
                                 struct ferry_buf *scratch);
int64_t ferry__vcanon_null_hash(int pos);
/* The row hash: hashint8extended(x, 0) of the XOR of the row's value hashes. */
int64_t ferry__vcanon_row_hash(int64_t x);
/* PostgreSQL's hash_bytes_extended (lookup3) and hashint8extended, for tests. */
uint64_t ferry__vcanon_hash_bytes(const void *p, size_t n, uint64_t seed);
uint64_t ferry__vcanon_hash_int8(int64_t v, uint64_t seed);
/* A decimal integer text (as PostgreSQL prints sum(bigint)), reduced mod 2^64. */
uint64_t ferry__vcanon_sum_text(const char *s);
/* Key values travel between sides as text normalized for their type (ints in decimal,
 * uuid lowercase, dates/timestamps in ferry's text form): parses `s` as a value of t and
 * writes its normal text into *out (caller frees). FERRY_EINVAL when it does not parse. */
int ferry__vcanon_key_text(enum ferry_type t, const char *s, size_t n, char **out,
                           struct ferry_error *err);
/* Parses a normalized key text into a canonical value (for binding). */
int ferry__vcanon_key_value(enum ferry_type t, const char *s, struct ferry_vvalue *v);
/* Whether keys of this type are ordered the same way by PostgreSQL and SQLite as stored
 * by ferry (ints, text under byte order, uuid, dates and timestamps as fixed-width text). */
bool ferry__vcanon_key_orderable(enum ferry_type t);

/* ---- what is compared ---------------------------------------------------------------- */

enum ferry_vhow {
    FERRY_VHOW_PLAIN = 0, /* destination = source value */
    FERRY_VHOW_SHA256     /* destination = hex SHA-256 of the source value's text */
};

struct ferry_vcol {
    char *dst;            /* destination column name */
    char *src;            /* source column name */
    enum ferry_type type; /* type the pipeline writes */
    enum ferry_type src_type;
    int precision, scale;
    enum ferry_vhow how;
    int key_pos; /* 1..n in the key, else 0 */
};

/* One end of the comparison, with the columns named for that end. */
struct ferry_vtable {
    const struct ferry_vcol *cols;
    int n_cols;
    const int *key; /* indexes into cols, key order */
    int n_key;
    bool source;          /* source end: column names are `src`, values may need `how` */
    bool byte_order_text; /* compare text keys bytewise (COLLATE "C") */
    bool json_normalize;  /* PostgreSQL: compare json as jsonb text (destination is jsonb) */
    /* --until-checkpoint: only rows with (cols[until_col[0]], ...) <= (until[0], ...), the
     * saved route position (cursor columns then key), as normal key texts */
    const int *until_col;
    char *const *until;
    int n_until;
    /* The second canonical form, for pairs with a MySQL side (MySQL's SQL has no lookup3):
     * row hash = the first 64 bits (big-endian) of MD5 over the row's canonical text, one
     * piece per compared column, 'N' for NULL else 'V' <byte length> ':' <text>; texts in
     * docs/internals/verify.md. Computed by my_verify.c and pg_verify.c only. */
    bool text_md5;
    /* The schema the pipeline writes (the transforms' output: every destination column, its
     * exact type, the key), borrowed: what a side reading back files the sink wrote (CSV,
     * JSON Lines) declares to the files source. */
    const struct ferry_schema *written;
};

/* A key: one normalized text per key column (NULL for a null part). */
struct ferry_vkey {
    char **part;
};

struct ferry_vrange {
    const struct ferry_vkey *lo; /* NULL: unbounded */
    bool lo_incl;
    const struct ferry_vkey *hi; /* NULL: unbounded; inclusive */
};

struct ferry_vrow {
    struct ferry_vkey key;
    int64_t hash;
};

struct ferry_vrows {
    struct ferry_vrow *v;
    int64_t n, cap;
};

/* ---- one side (backend_*.c) ------------------------------------------------------------ */

struct ferry_vside;

struct ferry_vside_ops {
    /* Count and sum of row hashes of a range: send, then receive (PostgreSQL sides run
     * concurrently this way; others compute in send). */
    int (*digest_send)(struct ferry_vside *s, const struct ferry_vrange *r,
                       struct ferry_error *err);
    int (*digest_recv)(struct ferry_vside *s, int64_t *count, uint64_t *sum,
                       struct ferry_error *err);
    /* Keys at every step-th row of a range, in key order (split points). */
    int (*bounds)(struct ferry_vside *s, const struct ferry_vrange *r, int64_t step,
                  struct ferry_vrows *out, struct ferry_error *err);
    /* Optional: the smallest and largest key (normal text, NULL when the range is empty)
     * of a range, for single-column integer keys; lets the walk split arithmetically. */
    int (*key_span)(struct ferry_vside *s, const struct ferry_vrange *r, char **min, char **max,
                    struct ferry_error *err);
    /* Optional, single-column integer keys: the digests of the sub-ranges (lo, c1],
     * (c1, c2], ..., (cn, hi] of r in one statement (cuts: n ascending integer key texts);
     * counts/sums have n + 1 slots. Send, then receive, like digest. */
    int (*buckets_send)(struct ferry_vside *s, const struct ferry_vrange *r,
                        const struct ferry_vrows *cuts, struct ferry_error *err);
    int (*buckets_recv)(struct ferry_vside *s, int64_t *counts, uint64_t *sums, int64_t n,
                        struct ferry_error *err);
    /* Every row of a range: key and row hash. */
    int (*rows)(struct ferry_vside *s, const struct ferry_vrange *r, struct ferry_vrows *out,
                struct ferry_error *err);
    /* Repair: the row of key k with every field of sc (named as the side names them)
     * written into rw as one insert; *found false when the side has no such row. */
    int (*fetch)(struct ferry_vside *s, const struct ferry_vkey *k, const struct ferry_schema *sc,
                 struct ferry_row_writer *rw, bool *found, struct ferry_error *err);
    /* Optional, before the first fetch: the only keys that will be fetched (the side reading
     * its whole source again keeps just their rows). keys outlive the fetches. */
    int (*fetch_only)(struct ferry_vside *s, const struct ferry_vkey *const *keys, int64_t n,
                      struct ferry_error *err);
    /* Ends the snapshot the side reads in and starts a new one (the re-check pass). */
    int (*refresh)(struct ferry_vside *s, struct ferry_error *err);
    void (*close)(struct ferry_vside *s);
};

struct ferry_vside {
    const struct ferry_vside_ops *ops;
    const char *what; /* "source" | "destination" */
    char name[512];   /* table, for messages and the report */
    const struct ferry_vtable *t;
    int64_t bytes; /* bytes that crossed to ferry (results + statements) */
    int64_t queries;
    bool whole_only; /* answers only the whole range and single keys */
    bool read_whole; /* read whole at open: cannot honour --until-checkpoint */
    int sort_runs;   /* read through ferry: sorted runs spilled to disk (0: held in memory) */
};

/* ---- the sorted (key, hash) list of a side read through ferry (vsorted.c) ---------------- */

/* The order of the database sides: integer parts (kint[i]) by value, others by the bytes of
 * their normal text, NULL first. */
int ferry__vkey_order(const struct ferry_vkey *a, const struct ferry_vkey *b, int n,
                      const bool *kint);
/* Rows added in any order; above `budget` bytes held they are sorted and spilled as runs to
 * an unlinked temporary file under TMPDIR, merged at finish into one sorted file with a
 * sparse index (every 512th record: key, offset, prefix sum). Positions are 0-based in key
 * order; after(k, incl) is the first row after k (at or after when incl; 0 for k NULL). */
struct ferry_vsorted;
/* The budget of one side: FERRY_VERIFY_SORT_BYTES (tests) or a quarter of the `memory:`
 * the verification set (set_memory, per thread; 0: the default 256 MiB), at least 1 MiB. */
void ferry__vsorted_set_memory(int64_t memory);
int64_t ferry__vsorted_budget(void);
int ferry__vsorted_new(int n_key, const bool *kint, int64_t budget, const char *name,
                       struct ferry_vsorted **out, struct ferry_error *err);
/* Takes parts (n_key texts, NULL for a null part), also on failure. */
int ferry__vsorted_add(struct ferry_vsorted *v, char **parts, int64_t hash,
                       struct ferry_error *err);
int ferry__vsorted_finish(struct ferry_vsorted *v, struct ferry_error *err);
int64_t ferry__vsorted_count(const struct ferry_vsorted *v);
uint64_t ferry__vsorted_sum(const struct ferry_vsorted *v);
int ferry__vsorted_runs(const struct ferry_vsorted *v); /* runs spilled (0: in memory) */
int ferry__vsorted_after(struct ferry_vsorted *v, const struct ferry_vkey *k, bool incl,
                         int64_t *pos, struct ferry_error *err);
/* Sum of the hashes of rows [0, i). */
int ferry__vsorted_prefix(struct ferry_vsorted *v, int64_t i, uint64_t *sum,
                          struct ferry_error *err);
/* Row i (0 <= i < count), valid until the next call on v. */
int ferry__vsorted_row(struct ferry_vsorted *v, int64_t i, const struct ferry_vrow **row,
                       struct ferry_error *err);
void ferry__vsorted_free(struct ferry_vsorted *v);

/* A side read through the pipeline's source connector and transforms (backend_stream.c). */
int ferry__vside_stream_open(const struct ferry_pipeline_spec *p,
                             const struct ferry_resource_spec *r, const struct ferry_vtable *t,
                             const char *what, struct ferry_vside **out, struct ferry_error *err);
/* A side made of Parquet files read by ferry's Parquet reader (backend_stream.c). */
int ferry__vside_parquet_open(char *const *paths, int n_paths, const char *name,
                              const struct ferry_vtable *t, const char *what,
                              struct ferry_vside **out, struct ferry_error *err);
/* A side made of CSV or JSON Lines files a files sink wrote (verify.c), read by the
 * files source through ferry__vside_stream_open: a one-resource pipeline reads the files
 * `glob` matches (at least one must) as `table`, with format, header, delimiter and null
 * from `sink` (the sink section; csv or jsonl) and `written` as the declared schema and key.
 * Every file is read, hashed and closed before this returns: the caller may delete them. */
int ferry__vside_text_open(struct ferry_cfg *sink, const char *glob, const char *table,
                           const struct ferry_schema *written, const struct ferry_vtable *t,
                           const char *what, struct ferry_vside **out, struct ferry_error *err);
/* The database sides (chunk digests computed by the database) are the connectors':
 * their verify_open slot (ferry/connector.h); postgres, sqlite, mysql, s3 and iceberg have
 * one. */

/* Writes one canonical value (as canon takes it; decimal128 as its text) of field f into
 * rw, converting to the field's type. */
int ferry__vrepair_put(struct ferry_row_writer *rw, const struct ferry_field *f,
                       const struct ferry_vvalue *v, struct ferry_error *err);

void ferry__vrows_clear(struct ferry_vrows *r, int n_key);
int ferry__vrows_push(struct ferry_vrows *r, char **parts, int64_t hash, struct ferry_error *err);
/* One row a side's database answered to a chunk walk (bounds, rows), pushed into r: its key
 * cells read through cell (key column k's text and length, NULL for SQL NULL), each
 * normalized by ferry__vcanon_key_text for t's key column type, and hash. The database
 * sides' shared plumbing (postgres, mysql, sqlite): each only reads its result. */
typedef const char *(*ferry_vcell_fn)(void *ctx, int k, size_t *len);
int ferry__vrows_push_cells(struct ferry_vrows *r, const struct ferry_vtable *t,
                            ferry_vcell_fn cell, void *ctx, int64_t hash, struct ferry_error *err);
void ferry__vkey_free(struct ferry_vkey *k, int n_key);

/* ---- repair (repair.c) ------------------------------------------------------------------ */

struct ferry_vfix {
    struct ferry_vkey key;
    bool delete_; /* extra in the destination: delete; else upsert the source row */
};

/* Re-copies the rows of `fix` from the source side through the pipeline's transforms and
 * the sink's apply in upsert (or merge, when there are deletes) mode, in one session.
 * Refuses (FERRY_EPOLICY) a sink that cannot upsert or delete. */
int ferry__verify_repair(const struct ferry_pipeline_spec *p, const struct ferry_resource_spec *r,
                         struct ferry_vside *src, const struct ferry_vfix *fix, int64_t n_fix,
                         int64_t *repaired, struct ferry_error *err);

/* ---- the verification (verify.c) ---------------------------------------------------- */

struct ferry_verify_opts {
    const char *resource; /* NULL: every resource */
    int64_t chunk_rows;   /* split a differing range until chunks are this small (1000) */
    int fanout;           /* ways a differing chunk is split (16) */
    int max_listed;       /* keys listed per kind (20) */
    bool repair;
    bool until_checkpoint;
    const char *state_path; /* for --until-checkpoint and events */
};

enum ferry_vdiff {
    FERRY_VDIFF_MISSING = 0,
    FERRY_VDIFF_EXTRA,
    FERRY_VDIFF_DIFFERENT,
    FERRY_VDIFF_CHANGED,
    FERRY_VDIFF_KINDS
};

struct ferry_verify_resource {
    char *resource;
    char *source_table;
    char *dest_table;
    int64_t source_rows, dest_rows;
    int64_t count[FERRY_VDIFF_KINDS];
    char **listed[FERRY_VDIFF_KINDS]; /* key texts, max_listed each */
    int n_listed[FERRY_VDIFF_KINDS];
    int64_t chunks, chunks_mismatched;
    int64_t source_bytes, dest_bytes;
    int64_t source_queries, dest_queries;
    int source_sort_runs, dest_sort_runs; /* runs spilled by a side read through ferry */
    char **not_compared; /* "email (hmac_sha256)" */
    int n_not_compared;
    int64_t repaired;  /* rows re-copied or deleted by --repair */
    bool repair_done;  /* --repair ran and the resource was verified again */
    bool repair_clean; /* ... and that re-verify found no difference */
    double seconds;
};

struct ferry_verify_report {
    struct ferry_verify_resource *res;
    int n_res;
    double seconds;
};

typedef void (*ferry_verify_event_fn)(void *ctx, const char *resource, const char *type,
                                      const char *payload_json);

/* Verifies every selected resource of p. Differences are not an error: the report holds
 * them (ferry_verify_differs). `on_event` (may be NULL) receives verify.chunk_mismatch and
 * verify.completed. */
int ferry_verify_run(const struct ferry_pipeline_spec *p, const struct ferry_verify_opts *o,
                     ferry_verify_event_fn on_event, void *event_ctx,
                     struct ferry_verify_report **out, struct ferry_error *err);
bool ferry_verify_differs(const struct ferry_verify_report *r);
/* `verify: after_run`: verifies every resource of p after a completed run and reports
 * through on_event only (verify.chunk_mismatch, verify.completed; an error becomes a
 * verify.completed with {"error": ...}). Never fails the run. */
void ferry_verify_after_run(const struct ferry_pipeline_spec *p, ferry_verify_event_fn on_event,
                            void *event_ctx);
/* The report as a JSON object (caller frees). */
char *ferry_verify_report_json(const struct ferry_verify_report *r);
void ferry_verify_report_free(struct ferry_verify_report *r);

#endif
