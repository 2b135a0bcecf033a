/* checkpoint/position.h - a checkpoint position, typed, and its one codec.
 *
 * A position says where a shard resumes. Stored (state store, destinations' checkpoint
 * tables, batch.written payloads) it is a JSON object; this is the only code that should
 * read or write that text (docs/internals/checkpoint.md lists who still does):
 *
 *   {"shard":S,"key":[v,...],"n":N,"k":K,"g":"..","done":true,"reset":true,"object":"..",
 *    "snapshot":"..","attempt":A}
 *
 * every member optional (shard 0 when absent), in that order when encoded. The batch builder
 * carries its position typed and encodes it here (stored forms of earlier versions decode
 * and re-encode unchanged).
 * Key values are typed as JSON types: null, bool, integer, real, text; what they mean is
 * the source's business (its column types: a date is days, binary is hex text...).
 *
 * Ownership: a decoded position owns its key values and strings; ferry_position_clear frees
 * them (and accepts a zeroed or cleared position). A position built to be encoded may borrow
 * them instead (the batch builder's does) and is then never cleared. Not thread-safe; no global
 * state. */
#ifndef FERRY_CHECKPOINT_POSITION_H
#define FERRY_CHECKPOINT_POSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

enum ferry_key_kind {
    FERRY_KEY_NULL = 0,
    FERRY_KEY_BOOL,
    FERRY_KEY_INT,
    FERRY_KEY_REAL, /* finite; NaN and infinities are stored as text ("NaN", "Infinity") */
    FERRY_KEY_TEXT
};

struct ferry_key_value {
    enum ferry_key_kind kind;
    bool b;
    int64_t i;
    double real;
    bool single; /* REAL: a 4-byte float's value, encoded in the shortest form that reads back
                  * as the same float (the builder's); decoding leaves it false */
    char *text; /* TEXT: owned, NUL-terminated, may hold NUL bytes (len counts them) */
    size_t len;
};

struct ferry_position {
    int shard;
    bool has_key; /* "key" present (it may be empty) */
    int n_key;
    struct ferry_key_value *key; /* owned, n_key values: the last row's key tuple */
    bool has_n;
    int64_t n;      /* log position (LSN), byte or row offset: the source's */
    int64_t k;      /* with n: rows of the following unit already written */
    char *tag;      /* owned, with n: the text beside it (a MySQL GTID set), or NULL */
    bool done;      /* the shard is read to its end */
    bool reset;     /* the saved point was dropped (`ferry cdc drop`) */
    char *object;   /* owned: the object or file the offset is in, or NULL */
    char *snapshot; /* owned: a source snapshot id, or NULL */
    int attempt;    /* with snapshot: the attempt that exported it (0: none) */
};

/* Zeroes p (shard 0, nothing present). */
void ferry_position_init(struct ferry_position *p);
/* Frees what p owns and zeroes it. */
void ferry_position_clear(struct ferry_position *p);
/* Decodes the stored text (len bytes) into out (initialised here). FERRY_EINVAL naming the
 * member for anything that is not a position: not an object, a member of the wrong type or
 * range, an unknown member, a key value that is an array or object; FERRY_ENOMEM. On error
 * out is left cleared. */
int ferry_position_decode(const char *text, size_t len, struct ferry_position *out,
                          struct ferry_error *err);
/* Appends the stored form of p to b. FERRY_ENOMEM (b keeps what it had before). */
int ferry_position_encode(const struct ferry_position *p, struct ferry_buf *b,
                          struct ferry_error *err);
/* The stored form as a new string (ferry_free). */
int ferry_position_to_text(const struct ferry_position *p, char **out, struct ferry_error *err);
/* Whether stored text says its shard is done; false for NULL or text that is no position. */
bool ferry_position_text_done(const char *text);

/* The key tuple of p as a new jansson array (json_decref it; NULL when out of memory), for
 * sources whose frozen plans hold key values as JSON (position_json.c). Text values keep
 * their bytes (NUL included); reals their double. */
struct json_t;
struct json_t *ferry_position_key_json(const struct ferry_position *p);

#endif
