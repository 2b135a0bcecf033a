/* checkpoint/position_json.c - a decoded position's key tuple as a jansson array, for the
 * sources whose frozen plans hold key values as JSON (sqlite, postgres): they decode the
 * stored text with the codec (position.c) and never parse it themselves. Calls jansson.
 * Called by the sqlite and postgres sources. */
#include <jansson.h>
#include "checkpoint/position.h"

static json_t *value_json(const struct ferry_key_value *v)
{
    switch (v->kind) {
    case FERRY_KEY_NULL: return json_null();
    case FERRY_KEY_BOOL: return json_boolean(v->b);
    case FERRY_KEY_INT: return json_integer((json_int_t)v->i);
    case FERRY_KEY_REAL: return json_real(v->real);
    case FERRY_KEY_TEXT: return json_stringn(v->text, v->len);
    }
    return NULL;
}

struct json_t *ferry_position_key_json(const struct ferry_position *p)
{
    json_t *arr = json_array();
    for (int i = 0; arr != NULL && i < p->n_key; i++) {
        json_t *v = value_json(&p->key[i]);
        if (v == NULL || json_array_append_new(arr, v) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}
