/* notify/notify.c - webhook notifications (notify/notify.h).
 *
 * Owns: the check of `notify:` targets, the notifier thread of a process running a
 * pipeline, and delivery. The notifier reads the run's events from the bus (the same as
 * `ferry events`), keeps those a target subscribes to, and records one row per (run,
 * event, target) in the state store (migration 9) before any attempt: a crash loses no
 * notification, and a duplicate event (redelivery) adds no row. Delivery claims a due row
 * (next_us moves forward, so two deliverers never send it at once), POSTs it (net/http.h)
 * and records the result: delivered; or pending again after backoff 1 s * 2^(n-1) capped at
 * 5 min; or dead after FERRY_NOTIFY_MAX_ATTEMPTS (default 12) or a 4xx other than 408/429.
 * Secrets and webhook URLs given as env:/file: references are resolved at each attempt and
 * never stored, logged or returned. Calls the store, the bus, config (secrets), the HTTP
 * client (net/http.h). */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bus/bus.h"
#include "ferry/core.h"
#include "net/http.h"
#include "notify/notify.h"
#include "store/store.h"

static const char *const event_words[] = {FERRY_EV_RUN_COMPLETED, FERRY_EV_RUN_FAILED,
                                          FERRY_EV_RUN_RETRY_SCHEDULED, FERRY_EV_RUN_PAUSED,
                                          FERRY_EV_SCHEMA_CHANGED, FERRY_EV_BATCH_DIVERGENCE,
                                          "cdc.lag", NULL};
#define EV_CDC_LAG 6
static const char *const target_keys[] = {"webhook", "secret", "on", "format", "lag_threshold",
                                          NULL};

struct target {
    char url[512];        /* a URL, or env:NAME / file:PATH holding one */
    char secret_ref[256]; /* "" = unsigned */
    char format[8];       /* json | slack */
    unsigned on;          /* bit i: event_words[i] */
    int64_t lag_ms;       /* cdc.lag above this */
    bool lag_above;       /* the last lag seen was above: notify once per excursion */
};

static int event_index(const char *type)
{
    for (int i = 0; event_words[i]; i++)
        if (!strcmp(type, event_words[i])) return i;
    return -1;
}

/* ---- targets ---- */

static bool url_ok(const char *u)
{
    return !strncmp(u, "http://", 7) || !strncmp(u, "https://", 8) || !strncmp(u, "env:", 4) ||
           !strncmp(u, "file:", 5);
}

static int parse_target(struct ferry_cfg *n, struct target *t, struct ferry_error *err)
{
    memset(t, 0, sizeof *t);
    if (n->kind != FERRY_CFG_MAP)
        return ferry_cfg_error(err, n, "expected a map {webhook: URL, secret: env:NAME, on: [...]}");
    for (int i = 0; i < n->n_children; i++) {
        bool known = false;
        for (int k = 0; target_keys[k]; k++) known |= !strcmp(n->children[i]->key, target_keys[k]);
        if (!known)
            return ferry_cfg_error(err, n->children[i],
                                   "unknown key (a notify target takes webhook, secret, on, "
                                   "format, lag_threshold)");
    }
    const char *url = NULL, *secret = NULL;
    int rc;
    if ((rc = ferry_cfg_str(n, "webhook", true, &url, err))) return rc;
    if (!url_ok(url) || strlen(url) >= sizeof t->url)
        return ferry_cfg_error(err, ferry_cfg_get(n, "webhook"),
                               "expected an http:// or https:// URL, or env:NAME / file:PATH "
                               "holding one");
    snprintf(t->url, sizeof t->url, "%s", url);
    if ((rc = ferry_cfg_str(n, "secret", false, &secret, err))) return rc;
    if (secret && ((strncmp(secret, "env:", 4) && strncmp(secret, "file:", 5)) ||
                   strlen(secret) >= sizeof t->secret_ref))
        return ferry_cfg_error(err, ferry_cfg_get(n, "secret"),
                               "expected a secret reference env:NAME or file:PATH (a plain "
                               "value would be saved with the run)");
    if (secret) snprintf(t->secret_ref, sizeof t->secret_ref, "%s", secret);
    static const char *const formats[] = {"json", "slack", NULL};
    int f = 0;
    if ((rc = ferry_cfg_enum(n, "format", false, formats, &f, err))) return rc;
    snprintf(t->format, sizeof t->format, "%s", formats[f]);
    t->lag_ms = 60000;
    if ((rc = ferry_cfg_duration_ms(n, "lag_threshold", false, &t->lag_ms, err))) return rc;
    char **on = NULL;
    int non = 0;
    if ((rc = ferry_cfg_strv(n, "on", false, &on, &non, err))) return rc;
    if (on == NULL) t->on = 1u << 0 | 1u << 1; /* run.completed, run.failed */
    for (int i = 0; on && i < non; i++) {
        int e = event_index(on[i]);
        if (e < 0) {
            rc = ferry_cfg_error(err, ferry_cfg_get(n, "on"),
                                 "unknown event \"%.60s\"; known: run.completed, run.failed, "
                                 "run.retry_scheduled, run.paused, schema.changed, "
                                 "batch.chunk_divergence, cdc.lag", on[i]);
            break;
        }
        t->on |= 1u << e;
    }
    ferry_cfg_strv_free(on);
    return rc;
}

int ferry_notify_check(struct ferry_cfg *node, struct ferry_error *err)
{
    if (node == NULL) return FERRY_OK;
    if (node->kind != FERRY_CFG_LIST)
        return ferry_cfg_error(err, node, "expected a list of targets [{webhook: URL, ...}]");
    if (node->n_children > 32) return ferry_cfg_error(err, node, "at most 32 targets");
    struct target t;
    for (int i = 0; i < node->n_children; i++) {
        int rc = parse_target(node->children[i], &t, err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

/* ---- body and signature ---- */

char *ferry_notify_body(const char *format, const char *type, int64_t run_id, const char *pipeline,
                        int attempt, const char *resource, int64_t time_us, const char *payload,
                        int64_t seq)
{
    json_t *data = json_loads(payload && payload[0] ? payload : "{}", 0, NULL);
    if (data == NULL) data = json_object();
    json_t *j;
    if (format && !strcmp(format, "slack")) {
        /* Slack-compatible incoming webhook: one line of text */
        const char *msg = json_string_value(json_object_get(data, "message"));
        if (msg == NULL) msg = json_string_value(json_object_get(data, "reason"));
        char text[1200];
        snprintf(text, sizeof text, "ferry: %s - run %" PRId64 " of pipeline %s (attempt %d)%s%s%s%s",
                 type, run_id, pipeline, attempt, resource && resource[0] ? ", resource " : "",
                 resource ? resource : "", msg ? ": " : "", msg ? msg : "");
        j = json_pack("{s:s}", "text", text);
        json_decref(data);
    } else {
        char id[64];
        snprintf(id, sizeof id, "%" PRId64 "-%" PRId64, run_id, seq);
        j = json_pack("{s:s,s:s,s:I,s:s,s:i,s:s,s:I,s:o}", "id", id, "type", type, "run_id",
                      (json_int_t)run_id, "pipeline", pipeline, "attempt", attempt, "resource",
                      resource ? resource : "", "time_us", (json_int_t)time_us, "data", data);
    }
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    char *out = s ? ferry_strdup(s) : NULL;
    free(s);
    return out;
}

void ferry_notify_signature(const char *secret, const char *body, size_t len, char out[72])
{
    uint8_t mac[32];
    ferry_hmac_sha256(secret, strlen(secret), body, len, mac);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sha256=", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[mac[i] >> 4];
        out[8 + 2 * i] = hex[mac[i] & 15];
    }
    out[71] = '\0';
}

/* ---- delivery ---- */

static int max_attempts(void)
{
    const char *v = getenv("FERRY_NOTIFY_MAX_ATTEMPTS");
    int n = v ? (int)strtol(v, NULL, 10) : 12;
    return n >= 1 && n <= 100 ? n : 12;
}

/* The POST itself, through the engine's HTTP client (net/http.h): 5 s to connect, 15 s in
 * all, no retry here (the delivery's own backoff retries), the answer discarded (at most
 * 1 MiB). The target is named "webhook" in errors: its URL may hold a token (Slack). */
static int send_post(const struct ferry_notification *n, const char *url, const char *body,
                     const char *secret, time_t now, bool *permanent, char *why, size_t why_len)
{
    char ts[64], ev[160], id[64], sig_line[96];
    snprintf(ts, sizeof ts, "X-Ferry-Timestamp: %lld", (long long)now);
    snprintf(ev, sizeof ev, "X-Ferry-Event: %s", n->event);
    snprintf(id, sizeof id, "X-Ferry-Delivery: %" PRId64, n->id);
    const char *headers[6] = {"Content-Type: application/json", ts, ev, id, NULL, NULL};
    if (secret) {
        char sig[72];
        ferry_notify_signature(secret, body, strlen(body), sig);
        snprintf(sig_line, sizeof sig_line, "X-Ferry-Signature: %s", sig);
        headers[4] = sig_line;
    }
    struct ferry__http_opts o = {.what = "notify", .origin = "notify",
                                 .connect_timeout_ms = 5000, .total_timeout_ms = 15000,
                                 .body_cap = (size_t)1 << 20};
    struct ferry__http *h = NULL;
    struct ferry_error e;
    int rc = ferry__http_open(&o, &h, &e);
    long st = 0;
    if (rc == FERRY_OK) {
        struct ferry__http_req q = {.method = "POST", .url = url, .headers = headers,
                                    .body = body, .len = strlen(body), .name = "webhook"};
        struct ferry_buf answer;
        ferry_buf_init(&answer, 0);
        rc = ferry__http_do(h, &q, &answer, &st, &e);
        ferry_buf_release(&answer);
        ferry__http_close(h);
    }
    if (rc != FERRY_OK) {
        snprintf(why, why_len, "%s", e.message);
        return rc == FERRY_ENOMEM ? rc : FERRY_EIO;
    }
    if (st < 200 || st > 299) {
        snprintf(why, why_len, "HTTP %ld", st);
        *permanent = st >= 400 && st < 500 && st != 408 && st != 429;
        return FERRY_EIO;
    }
    return FERRY_OK;
}

/* One POST. FERRY_OK on 2xx; *permanent for a 4xx other than 408 and 429. */
static int post(const struct ferry_notification *n, bool *permanent, char *why, size_t why_len)
{
    *permanent = false;
    char *url = NULL, *secret = NULL;
    struct ferry_error e;
    if (!strncmp(n->target, "env:", 4) || !strncmp(n->target, "file:", 5)) {
        if (ferry_secret_resolve(n->target, "notify webhook", &url, &e) != FERRY_OK) {
            snprintf(why, why_len, "%s", e.message);
            return FERRY_ECONFIG;
        }
    } else {
        url = ferry_strdup(n->target);
    }
    if (n->secret_ref[0] && ferry_secret_resolve(n->secret_ref, "notify secret", &secret, &e) != FERRY_OK) {
        ferry_secret_free(url);
        snprintf(why, why_len, "%s", e.message);
        return FERRY_ECONFIG;
    }
    /* the raw body as sent: the stored one, with the time it is sent (json format) */
    time_t now = time(NULL);
    char *body = NULL;
    json_t *j = json_loads(n->body, 0, NULL);
    if (j && strcmp(n->format, "slack") != 0) json_object_set_new(j, "sent_at", json_integer(now));
    if (j) body = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    int rc = body && url ? send_post(n, url, body, secret, now, permanent, why, why_len)
                         : FERRY_ENOMEM;
    if (rc == FERRY_ENOMEM) snprintf(why, why_len, "out of memory");
    free(body);
    ferry_secret_free(url);
    ferry_secret_free(secret);
    return rc;
}

int ferry_notify_deliver_due(struct ferry_store *st, int max, int *sent, struct ferry_error *err)
{
    if (sent) *sent = 0;
    struct ferry_notification *v = NULL;
    int n = 0;
    int64_t now = ferry_now_wall_us();
    int rc = ferry_store_notification_list(st, "pending", now, max, &v, &n, err);
    for (int i = 0; rc == FERRY_OK && i < n; i++) {
        bool mine = false;
        /* a claim for longer than one attempt can take */
        rc = ferry_store_notification_claim(st, v[i].id, v[i].next_us, now + 60 * 1000000LL, &mine,
                                            err);
        if (rc != FERRY_OK || !mine) continue;
        char why[256] = "";
        bool permanent = false;
        int prc = post(&v[i], &permanent, why, sizeof why);
        int attempts = v[i].attempts + 1;
        const char *state = "delivered";
        int64_t next = 0;
        if (prc != FERRY_OK) {
            int64_t d = 1000;
            for (int a = 1; a < attempts && d < 300000; a++) d *= 2;
            if (d > 300000) d = 300000;
            next = ferry_now_wall_us() + d * 1000;
            state = permanent || prc == FERRY_ECONFIG || attempts >= max_attempts() ? "dead" : "pending";
            ferry_log(FERRY_LOG_WARN, "notify: %s of run %" PRId64 " to %s: attempt %d: %s%s",
                      v[i].event, v[i].run_id, v[i].target, attempts, why,
                      !strcmp(state, "dead") ? " (dead letter)" : "");
        } else if (sent) {
            (*sent)++;
        }
        rc = ferry_store_notification_result(st, v[i].id, state, attempts, next, why, err);
    }
    ferry_notifications_free(v, n);
    return rc;
}

/* ---- the notifier ---- */

struct ferry_notifier {
    char pipeline[256];
    struct target *t;
    int n_t;
    struct ferry_store *st;
    struct ferry_bus *bus;
    atomic_llong run_id;
    int64_t after, since_us;
    pthread_t thread;
    atomic_int stop;
};

static void targets_from_env(struct ferry_notifier *nt)
{
    const char *url = getenv("FERRY_NOTIFY_WEBHOOK");
    if (url == NULL || !url_ok(url) || strlen(url) >= sizeof nt->t[0].url) return;
    struct target *t = ferry_calloc(1, sizeof *t);
    if (t == NULL) return;
    snprintf(t->url, sizeof t->url, "%s", url);
    const char *sec = getenv("FERRY_NOTIFY_SECRET");
    if (sec && (!strncmp(sec, "env:", 4) || !strncmp(sec, "file:", 5)))
        snprintf(t->secret_ref, sizeof t->secret_ref, "%s", sec);
    const char *fmt = getenv("FERRY_NOTIFY_FORMAT");
    snprintf(t->format, sizeof t->format, "%s", fmt && !strcmp(fmt, "slack") ? "slack" : "json");
    t->lag_ms = 60000;
    const char *on = getenv("FERRY_NOTIFY_ON");
    char words[512];
    snprintf(words, sizeof words, "%s", on ? on : "run.completed,run.failed");
    char *save = NULL;
    for (char *w = strtok_r(words, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        int e = event_index(w);
        if (e >= 0) t->on |= 1u << e;
    }
    nt->t = t;
    nt->n_t = 1;
}

static void record(struct ferry_notifier *nt, const struct ferry_event *ev)
{
    int e = event_index(ev->type);
    bool lag = !strcmp(ev->type, FERRY_EV_WATERMARK_ADVANCED);
    if (e < 0 && !lag) return;
    double lag_s = 0;
    if (lag) {
        json_t *p = json_loads(ev->payload ? ev->payload : "{}", 0, NULL);
        json_t *ls = json_object_get(p, "lag_seconds");
        lag_s = json_is_number(ls) ? json_number_value(ls) : -1;
        json_decref(p);
        if (lag_s < 0) return;
        e = EV_CDC_LAG;
    }
    for (int i = 0; i < nt->n_t; i++) {
        struct target *t = &nt->t[i];
        if (!(t->on & (1u << e))) continue;
        if (lag) {
            bool above = lag_s * 1000.0 > (double)t->lag_ms;
            bool fire = above && !t->lag_above;
            t->lag_above = above;
            if (!fire) continue;
        }
        struct ferry_notification n;
        memset(&n, 0, sizeof n);
        n.run_id = ev->run_id;
        n.event_seq = ev->seq;
        snprintf(n.event, sizeof n.event, "%s", event_words[e]);
        snprintf(n.pipeline, sizeof n.pipeline, "%s", nt->pipeline);
        snprintf(n.target, sizeof n.target, "%s", t->url);
        snprintf(n.secret_ref, sizeof n.secret_ref, "%s", t->secret_ref);
        snprintf(n.format, sizeof n.format, "%s", t->format);
        n.body = ferry_notify_body(t->format, event_words[e], ev->run_id, nt->pipeline, ev->attempt,
                                   ev->resource, ev->time_us, ev->payload, ev->seq);
        n.next_us = ferry_now_wall_us();
        struct ferry_error err;
        if (n.body && ferry_store_notification_add(nt->st, &n, NULL, &err) != FERRY_OK)
            ferry_log(FERRY_LOG_WARN, "notify: recording %s of run %" PRId64 ": %s", n.event,
                      n.run_id, err.message);
        ferry_free(n.body);
    }
}

/* The run this process runs: the pipeline's newest run with our pid. */
static int64_t find_run(struct ferry_notifier *nt)
{
    struct ferry_run_info *v = NULL;
    int n = 0;
    int64_t id = 0;
    if (ferry_store_run_list(nt->st, nt->pipeline, 1, &v, &n, NULL) == FERRY_OK && n == 1 &&
        v[0].pid == (int)getpid())
        id = v[0].id;
    ferry_run_infos_free(v, n);
    return id;
}

static void poll_events(struct ferry_notifier *nt)
{
    int64_t run = atomic_load(&nt->run_id);
    if (run == 0) {
        run = find_run(nt);
        if (run == 0) return;
        atomic_store(&nt->run_id, run);
    }
    for (;;) {
        struct ferry_event *evs = NULL;
        int n = 0;
        if (ferry_bus_fetch(nt->bus, nt->after, run, 500, 0, &evs, &n, NULL) != FERRY_OK) return;
        for (int i = 0; i < n; i++) {
            /* earlier attempts' events were notified by the processes that ran them */
            if (evs[i].time_us >= nt->since_us) record(nt, &evs[i]);
            nt->after = evs[i].seq;
        }
        ferry_events_free(evs, n);
        if (n < 500) return;
    }
}

static void *notifier_main(void *arg)
{
    struct ferry_notifier *nt = arg;
    while (!atomic_load(&nt->stop)) {
        poll_events(nt);
        ferry_notify_deliver_due(nt->st, 50, NULL, NULL);
        for (int i = 0; i < 5 && !atomic_load(&nt->stop); i++) {
            struct timespec ts = {0, 100000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int ferry_notifier_start(const struct ferry_pipeline_spec *p, const char *state_path,
                         const char *bus_url, int64_t run_id, struct ferry_notifier **out,
                         struct ferry_error *err)
{
    *out = NULL;
    struct ferry_notifier *nt = ferry_calloc(1, sizeof *nt);
    if (nt == NULL) return ferry_error_set(err, FERRY_ENOMEM, "notify", "out of memory");
    snprintf(nt->pipeline, sizeof nt->pipeline, "%s", p->name);
    struct ferry_cfg *node = ferry_cfg_get(p->root, "notify");
    if (node && node->kind == FERRY_CFG_LIST && node->n_children > 0) {
        nt->t = ferry_calloc((size_t)node->n_children, sizeof *nt->t);
        for (int i = 0; nt->t && i < node->n_children; i++)
            if (parse_target(node->children[i], &nt->t[nt->n_t], NULL) == FERRY_OK) nt->n_t++;
    } else {
        targets_from_env(nt);
    }
    if (nt->n_t == 0) {
        ferry_free(nt->t);
        ferry_free(nt);
        return FERRY_OK;
    }
    atomic_store(&nt->run_id, run_id);
    nt->since_us = ferry_now_wall_us();
    int rc = ferry_store_open(state_path, &nt->st, err);
    if (rc == FERRY_OK) rc = ferry_bus_open(bus_url, state_path, &nt->bus, err);
    if (rc == FERRY_OK && pthread_create(&nt->thread, NULL, notifier_main, nt) != 0)
        rc = ferry_error_set(err, FERRY_ENOMEM, "notify", "cannot start the notifier thread");
    if (rc != FERRY_OK) {
        ferry_bus_close(nt->bus);
        ferry_store_close(nt->st);
        ferry_free(nt->t);
        ferry_free(nt);
        return rc;
    }
    *out = nt;
    return FERRY_OK;
}

void ferry_notifier_set_run(struct ferry_notifier *nt, int64_t run_id)
{
    if (nt && run_id > 0) atomic_store(&nt->run_id, run_id);
}

void ferry_notifier_finish(struct ferry_notifier *nt, int grace_ms)
{
    if (nt == NULL) return;
    atomic_store(&nt->stop, 1);
    pthread_join(nt->thread, NULL);
    poll_events(nt);
    int64_t end = ferry_now_mono_us() + (int64_t)grace_ms * 1000;
    for (;;) {
        ferry_notify_deliver_due(nt->st, 50, NULL, NULL);
        struct ferry_notification *v = NULL;
        int n = 0;
        bool left = false;
        if (ferry_store_notification_list(nt->st, "pending", 0, 1000, &v, &n, NULL) == FERRY_OK)
            for (int i = 0; i < n; i++) left |= v[i].run_id == atomic_load(&nt->run_id);
        ferry_notifications_free(v, n);
        if (!left || ferry_now_mono_us() >= end) break;
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
    }
    ferry_bus_close(nt->bus);
    ferry_store_close(nt->st);
    ferry_free(nt->t);
    ferry_free(nt);
}
