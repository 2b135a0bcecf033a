/* store/store.c - helpers shared by every state store implementation: run state names and
 * the free functions of the structures store.h hands out.
 *
 * Calls only core (ferry_free). Called by the store implementations and by their users. */
#include <stdlib.h>
#include <string.h>
#include "ferry/core.h"
#include "store/store.h"

static const char *const run_state_names[FERRY_RUN_STATE_MAX] = {
    [FERRY_RUN_REQUESTED] = "requested", [FERRY_RUN_RUNNING] = "running",
    [FERRY_RUN_PAUSED] = "paused",       [FERRY_RUN_COMPLETED] = "completed",
    [FERRY_RUN_FAILED] = "failed",       [FERRY_RUN_CANCELED] = "canceled",
    [FERRY_RUN_PARTIAL] = "partial",
};

const char *ferry_run_state_name(enum ferry_run_state s)
{
    if ((int)s < 0 || s >= FERRY_RUN_STATE_MAX) return "unknown";
    return run_state_names[s];
}

int ferry_run_state_from_name(const char *s, enum ferry_run_state *out)
{
    for (int i = 0; s != NULL && i < FERRY_RUN_STATE_MAX; i++) {
        if (strcmp(s, run_state_names[i]) == 0) {
            *out = (enum ferry_run_state)i;
            return FERRY_OK;
        }
    }
    return FERRY_EINVAL;
}

void ferry_run_info_clear(struct ferry_run_info *r)
{
    if (r == NULL) return;
    ferry_free(r->request);
    r->request = NULL;
}

void ferry_run_infos_free(struct ferry_run_info *v, int n)
{
    if (v == NULL) return;
    for (int i = 0; i < n; i++)
        ferry_run_info_clear(&v[i]);
    ferry_free(v);
}

void ferry_checkpoints_free(struct ferry_checkpoint *v, int n)
{
    if (v == NULL) return;
    for (int i = 0; i < n; i++)
        ferry_free(v[i].position);
    ferry_free(v);
}

void ferry_store_strings_free(char **v, int n)
{
    if (v == NULL) return;
    for (int i = 0; i < n; i++)
        ferry_free(v[i]);
    ferry_free(v);
}

const char *ferry_store_default_url(void)
{
    const char *v = getenv("FERRY_STORE");
    if (v == NULL || v[0] == '\0') v = getenv("FERRY_STATE");
    return v != NULL && v[0] != '\0' ? v : ".ferry/state.db";
}
