/* checkpoint/plan_cache.c - see plan_cache.h. Calls jansson. */
#include <string.h>
#include "checkpoint/plan_cache.h"
#include "ferry/core.h"

void ferry_plan_cache_clear(struct ferry_plan_cache *c)
{
    ferry_free(c->text);
    json_decref(c->root);
    c->text = NULL;
    c->root = NULL;
}

json_t *ferry_plan_cache_get(struct ferry_plan_cache *c, const char *text)
{
    if (text == NULL) return NULL;
    if (c->text != NULL && strcmp(c->text, text) == 0) return c->root;
    ferry_plan_cache_clear(c);
    c->root = json_loads(text, 0, NULL);
    c->text = c->root ? ferry_strdup(text) : NULL;
    if (c->text == NULL) ferry_plan_cache_clear(c);
    return c->root;
}
