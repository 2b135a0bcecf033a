/* bus/nats_bus.c - the NATS JetStream event bus (libnats).
 *
 * One stream (default FERRY, subjects "ferry.events.>"; another stream S named in the URL
 * gets "ferry.S.>", as two streams may not share subjects); an event of run R of the state
 * file with instance id I is published to "ferry.events.I.R" with a JetStream ack, and the
 * stream sequence in that ack is the bus sequence. The payload is the message body; the
 * envelope travels in headers (Ferry-Time, Ferry-Run, Ferry-Attempt, Ferry-Resource,
 * Ferry-Type).
 *
 * fetch reads "the next message with seq >= S on subject F" with JetStream direct gets
 * (stream allow_direct), one per event: it needs no consumer state on the server, starts
 * from any sequence and filters by run with the subject. The durable position of the one
 * consumer that matters, the tracker, is its mark in the state store, committed in the same
 * transaction as the fold: stronger than a JetStream ack, which could not be atomic with
 * the fold. A single stream stores messages in sequence order, so "seq > after" never
 * skips one. A core NATS subscription on the state file's subjects only wakes waiting
 * fetches (its messages are counted and dropped).
 *
 * Calls libnats, jansson (payload check) and core. Called through bus/bus.h. */
#include <inttypes.h>
#include <jansson.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "bus/bus.h"
#include "ferry/core.h"

#define POLL_US 1000000 /* a waiting fetch re-reads the stream this often without a wake-up */
#define API_WAIT_MS 5000
#define PUBLISH_RETRY_MS 30000

struct natsbus {
    struct ferry_bus bus;
    natsConnection *nc;
    jsCtx *js;
    natsSubscription *sub;
    char where[300]; /* "NATS bus at host:port (stream S)": for messages, no credentials */
    char stream[64];
    int replicas;         /* of a stream ferry creates (?replicas=N; 0: the server's default) */
    char root[80];        /* "ferry.events" (stream FERRY) or "ferry.<stream>" */
    char prefix[160];     /* root + ".<scope>." */
    char all[170];        /* prefix + ">" */
    struct ferry__bus_signal sig; /* messages seen on our subjects, wake() calls */
};

static struct natsbus *ctx_of(struct ferry_bus *b)
{
    return (struct natsbus *)b->ctx;
}

static int nats_fail(struct natsbus *nb, natsStatus s, jsErrCode jerr, const char *what,
                     struct ferry_error *err)
{
    int code = s == NATS_TIMEOUT ? FERRY_ETIMEOUT : FERRY_EIO;
    if (jerr != 0)
        return ferry_error_set(err, code, "nats", "%s: %s: %s (JetStream error %d)", nb->where,
                               what, natsStatus_GetText(s), (int)jerr);
    return ferry_error_set(err, code, "nats", "%s: %s: %s", nb->where, what, natsStatus_GetText(s));
}

/* A message id for JetStream's deduplication that no other publish ever has (a retry of
 * the same message reuses it): this process's random nonce and a counter. An id built from
 * the clock and the message's address could repeat (two publishes of a batch, times and
 * addresses differing by the same bits), and JetStream then acknowledged the second event
 * with the first one's sequence and dropped it. */
static uint64_t process_nonce;
static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t publishes;

static void nonce_init(void)
{
    if (getrandom(&process_nonce, sizeof process_nonce, 0) != (ssize_t)sizeof process_nonce)
        process_nonce = (uint64_t)ferry_now_wall_us() ^ ((uint64_t)getpid() << 32);
}

static void message_id(char *id, size_t n)
{
    pthread_once(&nonce_once, nonce_init);
    snprintf(id, n, "ferry-%016" PRIx64 "-%" PRIu64, process_nonce,
             (uint64_t)atomic_fetch_add(&publishes, 1));
}

static int nats_publish(struct ferry_bus *b, struct ferry_event *ev, struct ferry_error *err)
{
    struct natsbus *nb = ctx_of(b);
    const char *payload = ev->payload ? ev->payload : "{}";
    /* The other buses refuse a payload that is not JSON; so does this one. */
    json_error_t je;
    json_t *j = json_loads(payload, 0, &je);
    if (j == NULL)
        return ferry_error_set(err, FERRY_EINVAL, "bus",
                               "%s: publishing %s: payload is not JSON: %s", nb->where, ev->type,
                               je.text);
    json_decref(j);
    if (strpbrk(ev->resource, "\r\n") || strpbrk(ev->type, "\r\n"))
        return ferry_error_set(err, FERRY_EINVAL, "bus",
                               "%s: publishing %s: line break in resource or type", nb->where,
                               ev->type);
    if (ev->time_us == 0) ev->time_us = ferry_now_wall_us();
    char subj[200], t[24], run[24], att[16];
    snprintf(subj, sizeof subj, "%s%" PRId64, nb->prefix, ev->run_id);
    snprintf(t, sizeof t, "%" PRId64, ev->time_us);
    snprintf(run, sizeof run, "%" PRId64, ev->run_id);
    snprintf(att, sizeof att, "%d", ev->attempt);
    natsMsg *m = NULL;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus s = natsMsg_Create(&m, subj, NULL, payload, (int)strlen(payload));
    if (s == NATS_OK) s = natsMsgHeader_Set(m, "Ferry-Time", t);
    if (s == NATS_OK) s = natsMsgHeader_Set(m, "Ferry-Run", run);
    if (s == NATS_OK) s = natsMsgHeader_Set(m, "Ferry-Attempt", att);
    if (s == NATS_OK && ev->resource[0]) s = natsMsgHeader_Set(m, "Ferry-Resource", ev->resource);
    if (s == NATS_OK) s = natsMsgHeader_Set(m, "Ferry-Type", ev->type);
    if (s == NATS_OK) {
        /* A clustered stream may be between leaders for a few seconds when a node dies, and
         * a publish whose acknowledgement was lost may have landed: retry transient failures
         * for up to PUBLISH_RETRY_MS under one message id, which JetStream deduplicates. */
        char id[64];
        message_id(id, sizeof id);
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.ExpectStream = nb->stream; /* a stray stream on the same subjects is an error */
        po.MsgId = id;
        int64_t until = ferry_now_mono_us() + PUBLISH_RETRY_MS * 1000;
        for (;;) {
            jerr = 0;
            s = js_PublishMsg(&pa, nb->js, m, &po, &jerr);
            bool transient = s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS ||
                             s == NATS_CONNECTION_DISCONNECTED ||
                             jerr == JSClusterNotAvailErr || jerr == JSClusterNotLeaderErr;
            if (s == NATS_OK || !transient || ferry_now_mono_us() >= until) break;
            jsPubAck_Destroy(pa);
            pa = NULL;
            usleep(250000);
        }
    }
    int rc = FERRY_OK;
    if (s == NATS_OK && pa != NULL)
        ev->seq = (int64_t)pa->Sequence;
    else
        rc = nats_fail(nb, s, jerr, "publish", err);
    jsPubAck_Destroy(pa);
    natsMsg_Destroy(m);
    if (rc != FERRY_OK) ferry_error_prefix(err, "publishing %s", ev->type);
    return rc;
}

static int64_t header_int(natsMsg *m, const char *key)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(m, key, &v) != NATS_OK || v == NULL) return 0;
    return strtoll(v, NULL, 10);
}

/* One message of a direct get -> *ev. */
static int decode(struct natsbus *nb, natsMsg *m, struct ferry_event *ev, struct ferry_error *err)
{
    memset(ev, 0, sizeof *ev);
    ev->seq = header_int(m, "Nats-Sequence");
    if (ev->seq <= 0) ev->seq = (int64_t)natsMsg_GetSequence(m);
    ev->time_us = header_int(m, "Ferry-Time");
    ev->run_id = header_int(m, "Ferry-Run");
    ev->attempt = (int)header_int(m, "Ferry-Attempt");
    const char *v = NULL;
    if (natsMsgHeader_Get(m, "Ferry-Resource", &v) == NATS_OK && v)
        snprintf(ev->resource, sizeof ev->resource, "%s", v);
    v = NULL;
    if (natsMsgHeader_Get(m, "Ferry-Type", &v) == NATS_OK && v)
        snprintf(ev->type, sizeof ev->type, "%s", v);
    int len = natsMsg_GetDataLength(m);
    ev->payload = ferry_malloc((size_t)len + 1);
    if (ev->payload == NULL)
        return ferry_error_set(err, FERRY_ENOMEM, "bus", "%s: out of memory", nb->where);
    if (len > 0) memcpy(ev->payload, natsMsg_GetData(m), (size_t)len);
    ev->payload[len] = '\0';
    if (ev->seq <= 0)
        return ferry_error_set(err, FERRY_EIO, "nats", "%s: a direct get returned no sequence",
                               nb->where);
    return FERRY_OK;
}

static int read_events(void *ctx, int64_t after, int64_t run_id, int max,
                       struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct natsbus *nb = ctx;
    char subj[200];
    if (run_id != 0)
        snprintf(subj, sizeof subj, "%s%" PRId64, nb->prefix, run_id);
    else
        snprintf(subj, sizeof subj, "%s", nb->all);
    struct ferry_event *v = NULL;
    int cap = 0, cnt = 0, rc = FERRY_OK;
    uint64_t next = (uint64_t)(after < 0 ? 0 : after) + 1;
    while (cnt < max) {
        jsDirectGetMsgOptions dg;
        jsDirectGetMsgOptions_Init(&dg);
        dg.Sequence = next;
        dg.NextBySubject = subj;
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Wait = API_WAIT_MS;
        natsMsg *m = NULL;
        natsStatus s = js_DirectGetMsg(&m, nb->js, nb->stream, &jo, &dg);
        if (s == NATS_NOT_FOUND) break;
        if (s != NATS_OK) {
            rc = nats_fail(nb, s, 0, "direct get", err);
            break;
        }
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 16;
            if (ncap > max) ncap = max;
            struct ferry_event *nv = ferry_realloc(v, (size_t)ncap * sizeof *nv);
            if (nv == NULL) {
                natsMsg_Destroy(m);
                rc = ferry_error_set(err, FERRY_ENOMEM, "bus", "%s: out of memory", nb->where);
                break;
            }
            v = nv;
            cap = ncap;
        }
        rc = decode(nb, m, &v[cnt], err);
        natsMsg_Destroy(m);
        if (rc != FERRY_OK) {
            ferry_free(v[cnt].payload);
            break;
        }
        next = (uint64_t)v[cnt].seq + 1;
        cnt++;
    }
    if (rc != FERRY_OK || cnt == 0) {
        ferry_events_free(v, cnt);
        return rc;
    }
    *evs = v;
    *n = cnt;
    return FERRY_OK;
}

static int nats_fetch(struct ferry_bus *b, int64_t after, int64_t run_id, int max, int timeout_ms,
                      struct ferry_event **evs, int *n, struct ferry_error *err)
{
    struct natsbus *nb = ctx_of(b);
    return ferry__bus_fetch_wait(&nb->sig, POLL_US, read_events, nb, after, run_id, max,
                                 timeout_ms, evs, n, err);
}

static void on_message(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    struct natsbus *nb = closure;
    natsMsg_Destroy(msg);
    ferry__bus_signal_published(&nb->sig);
}

static void nats_wake(struct ferry_bus *b)
{
    ferry__bus_signal_wake(&ctx_of(b)->sig);
}

/* The caller guarantees no publish or fetch is still running (wake them first). */
static void nats_close(struct ferry_bus *b)
{
    struct natsbus *nb = ctx_of(b);
    ferry__bus_signal_close(&nb->sig);
    if (nb->sub) natsSubscription_Unsubscribe(nb->sub);
    if (nb->nc) natsConnection_Close(nb->nc);
    natsSubscription_Destroy(nb->sub);
    jsCtx_Destroy(nb->js);
    natsConnection_Destroy(nb->nc);
    ferry__bus_signal_destroy(&nb->sig);
    ferry_free(nb);
}

static const struct ferry_bus_vtable nats_vtable = {
    .name = "nats",
    .publish = nats_publish,
    .fetch = nats_fetch,
    .wake = nats_wake,
    .close = nats_close,
};

static bool name_ok(const char *s)
{
    if (s[0] == '\0' || strlen(s) > 48) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* Splits nats://[cred@]host:port[,nats://host:port...][?stream=NAME&replicas=N] into the URL
 * libnats gets (no query; a comma list names the servers of a cluster), the stream name, the
 * replicas of a stream ferry creates, and "host:port" for messages. */
static int parse_url(const char *url, char *conn, size_t conn_len, char *stream, size_t slen,
                     int *replicas, char *hostport, size_t hlen, struct ferry_error *err)
{
    const char *q = strchr(url, '?');
    size_t base = q ? (size_t)(q - url) : strlen(url);
    if (base >= conn_len)
        return ferry_error_set(err, FERRY_ECONFIG, "bus", "NATS bus URL is too long");
    memcpy(conn, url, base);
    conn[base] = '\0';
    snprintf(stream, slen, "FERRY");
    if (q) {
        const char *p = q + 1;
        while (*p) {
            const char *amp = strchr(p, '&');
            size_t plen = amp ? (size_t)(amp - p) : strlen(p);
            if (plen > 7 && strncmp(p, "stream=", 7) == 0)
                snprintf(stream, slen, "%.*s", (int)(plen - 7), p + 7);
            else if (plen > 9 && strncmp(p, "replicas=", 9) == 0 && p[9] >= '1' && p[9] <= '5' &&
                     plen == 10)
                *replicas = p[9] - '0';
            else
                return ferry_error_set(err, FERRY_ECONFIG, "bus",
                                       "NATS bus URL: unknown query parameter (stream=NAME,"
                                       " replicas=1..5)");
            if (amp == NULL) break;
            p = amp + 1;
        }
    }
    /* "host:port" of each server, without scheme or credentials */
    hostport[0] = '\0';
    for (const char *u = conn; *u;) {
        size_t ulen = strcspn(u, ",");
        const char *h = strstr(u, "://");
        h = h && h < u + ulen ? h + 3 : u;
        const char *at = memchr(h, '@', (size_t)(u + ulen - h));
        if (at) h = at + 1;
        size_t used = strlen(hostport);
        snprintf(hostport + used, hlen - used, "%s%.*s", used ? "," : "",
                 (int)strcspn(h, "/,"), h);
        u += ulen;
        if (*u == ',') u++;
    }
    if (!name_ok(stream))
        return ferry_error_set(err, FERRY_ECONFIG, "bus",
                               "NATS bus at %s: stream name must be letters, digits, _ and -",
                               hostport);
    return FERRY_OK;
}

/* Finds the stream or creates it. Two processes creating the same config at once both
 * succeed (JetStream treats an identical create as a no-op); a create that still fails is
 * retried once as a lookup. */
static int ensure_stream(struct natsbus *nb, struct ferry_error *err)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, nb->js, nb->stream, NULL, &jerr);
    if (s == NATS_NOT_FOUND) {
        jsStreamConfig cfg;
        jsStreamConfig_Init(&cfg);
        char subject[96];
        snprintf(subject, sizeof subject, "%s.>", nb->root);
        const char *subjects[1] = {subject};
        cfg.Name = nb->stream;
        cfg.Subjects = subjects;
        cfg.SubjectsLen = 1;
        cfg.Storage = js_FileStorage;
        cfg.AllowDirect = true;
        if (nb->replicas > 0) cfg.Replicas = nb->replicas;
        jerr = 0;
        s = js_AddStream(&si, nb->js, &cfg, NULL, &jerr);
        if (s != NATS_OK) {
            jsErrCode jerr2 = 0;
            if (js_GetStreamInfo(&si, nb->js, nb->stream, NULL, &jerr2) == NATS_OK) s = NATS_OK;
        }
    }
    if (s != NATS_OK) {
        jsStreamInfo_Destroy(si);
        return nats_fail(nb, s, jerr, "stream lookup/create", err);
    }
    bool direct = si->Config && si->Config->AllowDirect;
    /* A stream deleted and created again starts its sequences at 1 again: its creation
     * time names this sequence space (bus.h mark_tag). */
    snprintf(nb->bus.mark_tag, sizeof nb->bus.mark_tag, "nats:%s:%" PRId64, nb->stream,
             si->Created);
    jsStreamInfo_Destroy(si);
    if (!direct)
        return ferry_error_set(err, FERRY_ECONFIG, "bus",
                               "%s: the stream exists without allow_direct, which ferry reads"
                               " with (nats stream edit %s --allow-direct)",
                               nb->where, nb->stream);
    return FERRY_OK;
}

int ferry_bus_nats_open(const char *url, const char *scope, struct ferry_bus **out,
                        struct ferry_error *err)
{
    *out = NULL;
    if (scope == NULL || !name_ok(scope))
        return ferry_error_set(err, FERRY_EINVAL, "bus", "NATS bus: bad scope");
    struct natsbus *nb = ferry_calloc(1, sizeof *nb);
    if (nb == NULL) return ferry_error_set(err, FERRY_ENOMEM, "bus", "NATS bus: out of memory");
    ferry__bus_signal_init(&nb->sig);
    nb->bus.vt = &nats_vtable;
    nb->bus.ctx = nb;
    char conn[1024], hostport[200];
    int rc = parse_url(url, conn, sizeof conn, nb->stream, sizeof nb->stream, &nb->replicas,
                       hostport, sizeof hostport, err);
    snprintf(nb->where, sizeof nb->where, "NATS bus at %s (stream %s)", hostport, nb->stream);
    if (strcmp(nb->stream, "FERRY") == 0)
        snprintf(nb->root, sizeof nb->root, "ferry.events");
    else
        snprintf(nb->root, sizeof nb->root, "ferry.%s", nb->stream);
    snprintf(nb->prefix, sizeof nb->prefix, "%s.%s.", nb->root, scope);
    snprintf(nb->all, sizeof nb->all, "%s>", nb->prefix);
    natsOptions *opts = NULL;
    natsStatus s = NATS_OK;
    if (rc == FERRY_OK) {
        s = natsOptions_Create(&opts);
        /* A comma list names the servers of a cluster: libnats tries them in turn and
         * moves to another when the one it uses dies. */
        const char *servers[8];
        char list[1024];
        int n_servers = 0;
        snprintf(list, sizeof list, "%s", conn);
        for (char *save = NULL, *u = strtok_r(list, ",", &save); u && n_servers < 8;
             u = strtok_r(NULL, ",", &save))
            servers[n_servers++] = u;
        if (s == NATS_OK) s = natsOptions_SetServers(opts, servers, n_servers);
        if (s == NATS_OK) s = natsOptions_SetName(opts, "ferry");
        if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 5000);
        /* Ride out a short restart of the server; a longer outage fails publishes with a
         * timeout naming the server, and the run is resumed once it is back. */
        if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, 10);
        if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 500);
        if (s == NATS_OK) s = natsConnection_Connect(&nb->nc, opts);
        if (s != NATS_OK) rc = nats_fail(nb, s, 0, "cannot connect", err);
    }
    natsOptions_Destroy(opts);
    if (rc == FERRY_OK) {
        jsOptions jo;
        jsOptions_Init(&jo);
        jo.Wait = API_WAIT_MS;
        s = natsConnection_JetStream(&nb->js, nb->nc, &jo);
        if (s != NATS_OK) rc = nats_fail(nb, s, 0, "JetStream", err);
    }
    if (rc == FERRY_OK) rc = ensure_stream(nb, err);
    if (rc == FERRY_OK) {
        s = natsConnection_Subscribe(&nb->sub, nb->nc, nb->all, on_message, nb);
        if (s != NATS_OK) rc = nats_fail(nb, s, 0, "subscribe", err);
    }
    if (rc != FERRY_OK) {
        nats_close(&nb->bus);
        return rc;
    }
    *out = &nb->bus;
    return FERRY_OK;
}
