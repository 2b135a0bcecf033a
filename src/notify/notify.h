/* notify/notify.h - webhook notifications of a run's events (docs/operations.md,
 * notifications): `notify:` targets of a pipeline (or the server-wide FERRY_NOTIFY_*
 * defaults), a notifier that follows the run's events in the process running it and
 * records one delivery per (event, target) in the state store, and delivery with an
 * HMAC-SHA256 signature, a timestamp header, and retries with backoff until delivered or
 * dead (a dead letter, listed by the API).
 *
 * Body (format json): {"id","type","run_id","pipeline","attempt","resource","time_us",
 * "data":<the event's payload>,"sent_at":<unix seconds>}; format slack: {"text": ...}.
 * Headers: X-Ferry-Signature: sha256=HEX(HMAC-SHA256(secret, raw body)),
 * X-Ferry-Timestamp: the same unix seconds as sent_at, X-Ferry-Event, X-Ferry-Delivery. */
#ifndef FERRY_NOTIFY_H
#define FERRY_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>
#include "ferry/config.h"
#include "ferry/pipeline.h"

struct ferry_store;

/* Checks a pipeline's `notify:` node (a list of {webhook, secret, on, format,
 * lag_threshold}); FERRY_ECONFIG naming the key and line otherwise. Resolves nothing. */
int ferry_notify_check(struct ferry_cfg *node, struct ferry_error *err);

/* Pure: the body of a notification (ferry_free), and the signature header value
 * "sha256=HEX" of body under secret. */
char *ferry_notify_body(const char *format, const char *type, int64_t run_id, const char *pipeline,
                        int attempt, const char *resource, int64_t time_us, const char *payload,
                        int64_t seq);
void ferry_notify_signature(const char *secret, const char *body, size_t len, char out[72]);

/* Delivers the notifications due now (any pipeline), at most max; *sent counts the
 * delivered ones. Used by the notifier and by `ferry serve`'s sweeper. */
int ferry_notify_deliver_due(struct ferry_store *st, int max, int *sent, struct ferry_error *err);

/* The process running pipeline p: follows its run's events on a thread of its own
 * (store and bus opened here), from now. run_id 0: the run this process is running, found
 * in the store. *out is NULL (and FERRY_OK) when p has no targets and no server default. */
struct ferry_notifier;
int ferry_notifier_start(const struct ferry_pipeline_spec *p, const char *state_path,
                         const char *bus_url, int64_t run_id, struct ferry_notifier **out,
                         struct ferry_error *err);
/* Tells the notifier which run to follow (when it was not known at start). */
void ferry_notifier_set_run(struct ferry_notifier *nt, int64_t run_id);
/* Reads the last events, tries the pending deliveries for up to grace_ms, stops, frees.
 * What is still pending stays in the store (ferry serve's sweeper, or the next run of the
 * same state, delivers it). NULL is a no-op. */
void ferry_notifier_finish(struct ferry_notifier *nt, int grace_ms);

#endif
