/* pipeline/schema_change.c - the schema_changes policy and the notes of changes seen while
 * streaming (schema_change.h). Pure decisions plus a small locked list; calls only core. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "pipeline/schema_change.h"

const char *ferry_schema_changes_name(enum ferry_schema_changes p)
{
    return p == FERRY_SCHEMA_FREEZE ? "freeze" : p == FERRY_SCHEMA_FAIL ? "fail" : "evolve";
}

const char *ferry_unrepresentable_name(enum ferry_unrepresentable u)
{
    return u == FERRY_UNREP_NULL ? "null" : u == FERRY_UNREP_CLAMP ? "clamp" : "fail";
}

static int int_rank(enum ferry_type t)
{
    switch (t) {
    case FERRY_TYPE_INT8: return 1;
    case FERRY_TYPE_INT16: return 2;
    case FERRY_TYPE_INT32: return 3;
    case FERRY_TYPE_INT64: return 4;
    default: return 0;
    }
}

bool ferry_type_widens(const struct ferry_field *from, const struct ferry_field *to)
{
    if (from->type == to->type) {
        if (from->type != FERRY_TYPE_DECIMAL128) return true;
        /* as many digits before the point and at least as many after it */
        return to->scale >= from->scale &&
               to->precision - to->scale >= from->precision - from->scale;
    }
    int a = int_rank(from->type), b = int_rank(to->type);
    if (a > 0 && b > 0) return a < b;
    if (from->type == FERRY_TYPE_FLOAT32 && to->type == FERRY_TYPE_FLOAT64) return true;
    /* numeric(p,s) -> numeric: the exact text form holds every value */
    return from->type == FERRY_TYPE_DECIMAL128 && to->type == FERRY_TYPE_DECIMAL_TEXT;
}

enum ferry_schema_action ferry_schema_change_decide(enum ferry_schema_changes p,
                                                    enum ferry_schema_change_kind k)
{
    if (p == FERRY_SCHEMA_FAIL || k == FERRY_SC_RETYPED) return FERRY_SC_ERROR;
    switch (k) {
    /* a dropped column stops too: the next run's sink lets go of its NOT NULL first */
    case FERRY_SC_ADDED:
    case FERRY_SC_DROPPED: return p == FERRY_SCHEMA_EVOLVE ? FERRY_SC_STOP : FERRY_SC_CONTINUE;
    case FERRY_SC_WIDENED: /* freeze keeps the destination's type: values may not fit */
        return p == FERRY_SCHEMA_EVOLVE ? FERRY_SC_STOP : FERRY_SC_ERROR;
    case FERRY_SC_TRUNCATED: return FERRY_SC_APPLY;
    default: return FERRY_SC_CONTINUE; /* gone: its values are ignored */
    }
}

const char *ferry_schema_change_kind_name(enum ferry_schema_change_kind k)
{
    static const char *const names[] = {"added", "gone", "dropped", "widened", "retyped",
                                        "truncated"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

const char *ferry_schema_action_name(enum ferry_schema_action a)
{
    static const char *const names[] = {"continue", "stop", "apply", "error"};
    return (unsigned)a < sizeof names / sizeof *names ? names[a] : "?";
}

void ferry_field_type_text(const struct ferry_field *f, char *buf, size_t len)
{
    if (f->type == FERRY_TYPE_DECIMAL128)
        snprintf(buf, len, "decimal128(%d,%d)", f->precision, f->scale);
    else
        snprintf(buf, len, "%s", ferry_type_name(f->type));
}

/* ---- notes ---------------------------------------------------------------------------- */

struct note {
    char *route;
    char *json;
    const void *tag; /* the run of the thread that made it (NULL: none) */
    struct note *next;
};

static pthread_mutex_t notes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct note *notes_head, **notes_tail = &notes_head;
static _Thread_local const void *thread_tag;

void ferry_schema_change_tag_set(const void *tag)
{
    thread_tag = tag;
}

const void *ferry_schema_change_tag(void)
{
    return thread_tag;
}

/* Whether x is one of the notes a take of route by the calling thread gets. */
static bool note_matches(const struct note *x, const char *route)
{
    return strcmp(x->route, route) == 0 &&
           (x->tag == NULL || thread_tag == NULL || x->tag == thread_tag);
}

static int json_field(struct ferry_buf *b, const char *key, const char *value)
{
    int rc = ferry_buf_printf(b, ",\"%s\":", key);
    if (rc != FERRY_OK) return rc;
    if (value == NULL) return ferry_buf_printf(b, "null");
    return ferry_buf_json_string(b, value, strlen(value));
}

void ferry_schema_change_note(const char *route, const char *table, const char *column,
                              enum ferry_schema_change_kind k, const char *old_type,
                              const char *new_type, enum ferry_schema_changes p,
                              enum ferry_schema_action a)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "{\"table\":");
    if (rc == FERRY_OK) rc = ferry_buf_json_string(&b, table, strlen(table));
    if (rc == FERRY_OK) rc = json_field(&b, "column", column);
    if (rc == FERRY_OK) rc = json_field(&b, "change", ferry_schema_change_kind_name(k));
    if (rc == FERRY_OK) rc = json_field(&b, "old_type", old_type);
    if (rc == FERRY_OK) rc = json_field(&b, "new_type", new_type);
    if (rc == FERRY_OK) rc = json_field(&b, "policy", ferry_schema_changes_name(p));
    if (rc == FERRY_OK) rc = json_field(&b, "action", ferry_schema_action_name(a));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, "}");
    struct note *n = rc == FERRY_OK ? ferry_calloc(1, sizeof *n) : NULL;
    if (n != NULL) {
        n->route = ferry_strdup(route ? route : "");
        n->json = ferry_buf_take(&b);
        n->tag = thread_tag;
    }
    if (n == NULL || n->route == NULL || n->json == NULL) {
        ferry_log(FERRY_LOG_WARN, "table %s: a schema change was not noted (out of memory)",
                  table);
        if (n != NULL) ferry_free(n->route), ferry_free(n->json), ferry_free(n);
        ferry_buf_release(&b);
        return;
    }
    pthread_mutex_lock(&notes_lock);
    *notes_tail = n;
    notes_tail = &n->next;
    pthread_mutex_unlock(&notes_lock);
}

char **ferry_schema_change_take(const char *route, int *n)
{
    *n = 0;
    char **out = NULL;
    pthread_mutex_lock(&notes_lock);
    int count = 0;
    for (struct note *x = notes_head; x; x = x->next)
        count += note_matches(x, route);
    if (count > 0) out = ferry_calloc((size_t)count, sizeof *out);
    struct note **pp = &notes_head;
    notes_tail = &notes_head;
    while (*pp) {
        struct note *x = *pp;
        if (out != NULL && note_matches(x, route)) {
            *pp = x->next;
            out[(*n)++] = x->json;
            ferry_free(x->route);
            ferry_free(x);
            continue;
        }
        notes_tail = &x->next;
        pp = &x->next;
    }
    pthread_mutex_unlock(&notes_lock);
    return out;
}
