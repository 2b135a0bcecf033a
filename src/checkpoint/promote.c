/* checkpoint/promote.c - the rules that move a checkpoint (promote.h). Calls the position
 * codec. Called by the tracker and the runner. */
#include "checkpoint/promote.h"
#include <string.h>
#include "checkpoint/position.h"

enum ferry_checkpoint_scope ferry_checkpoint_written_scope(bool durable)
{
    return durable ? FERRY_CHECKPOINT_RUN : FERRY_CHECKPOINT_PENDING;
}

bool ferry_checkpoint_mode_has_route(const char *mode)
{
    return mode != NULL && (strcmp(mode, "incremental") == 0 || strcmp(mode, "cdc") == 0);
}

bool ferry_checkpoint_plan_route_due(bool run_completed, const char *resource_state)
{
    return run_completed && resource_state != NULL && strcmp(resource_state, "completed") == 0;
}

/* Decodes text; false when it is no position (or memory ran out: the caller then keeps
 * the route where it was, which only means reading again). */
static bool decoded(const char *text, struct ferry_position *p)
{
    if (text == NULL) return false;
    if (ferry_position_decode(text, strlen(text), p, NULL) == FERRY_OK) return true;
    return false;
}

bool ferry_checkpoint_carries_progress(const char *position)
{
    struct ferry_position p;
    if (!decoded(position, &p)) return false;
    bool yes = p.has_key || p.has_n;
    ferry_position_clear(&p);
    return yes;
}

static bool has_key(const char *position)
{
    struct ferry_position p;
    if (!decoded(position, &p)) return false;
    bool yes = p.has_key;
    ferry_position_clear(&p);
    return yes;
}

bool ferry_checkpoint_lower_from_held(int64_t route_run, const struct ferry_held_checkpoint *held,
                                      bool (*same_version)(void *ctx, int64_t run_id), void *ctx)
{
    return held != NULL && held->run_id > route_run && has_key(held->position) &&
           same_version(ctx, held->run_id);
}

const char *ferry_checkpoint_resume_of(const char *stored, const struct ferry_held_checkpoint *held,
                                       int64_t run_id, bool *record)
{
    *record = false;
    if (held == NULL || held->run_id != run_id || held->position == NULL) return stored;
    *record = stored == NULL || strcmp(stored, held->position) != 0;
    return held->position;
}
