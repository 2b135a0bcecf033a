/* checkpoint/plan_cache.h - a source instance's parsed frozen plan, kept between its shards.
 *
 * A source's extract is called once per shard with the whole plan's JSON text; parsing it
 * each time costs O(shards) per shard, O(shards^2) for a run (a lake of 10,000 objects:
 * minutes). The cache keeps the last text (a copy) and its parse: the next call with the
 * same text costs a comparison. Not thread-safe: one per source instance (one reader).
 * Ownership: the cache owns its copy and its parse; the root returned is borrowed until the
 * next call or ferry_plan_cache_clear. */
#ifndef FERRY_CHECKPOINT_PLAN_CACHE_H
#define FERRY_CHECKPOINT_PLAN_CACHE_H

#include <jansson.h>

struct ferry_plan_cache {
    char *text;
    json_t *root;
};

/* The parse of text (borrowed), or NULL when text is NULL, not JSON, or out of memory. */
json_t *ferry_plan_cache_get(struct ferry_plan_cache *c, const char *text);
void ferry_plan_cache_clear(struct ferry_plan_cache *c);

#endif
