/* connectors/mysql/my_gtid.h - global transaction ids (GTIDs) of the binary log: the set a
 * cdc position carries beside its file:offset, so that a stream can resume where the file is
 * gone (a failover, renamed or purged files) from the transactions it has seen. Pure: no
 * I/O, bounds-checked, written from the public documentation:
 *   MariaDB: a position is one `domain-server-seq` per replication domain, comma-separated
 *     ("0-1-42,1-7-9"); GTID_EVENT (162) opens a transaction: seq (8 bytes LE), domain
 *     (4), flags2 (1); the server id is the event header's.
 *   MySQL 8: a set of `uuid:interval[:interval...]` per source, comma-separated
 *     ("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7"); GTID_LOG_EVENT (33): flags (1),
 *     source uuid (16), gno (8 LE). Tagged GTIDs (MySQL 8.3's uuid:tag:n) are refused.
 *     Written from the docs only: no MySQL server in the suite.
 * One set holds one flavor. Adding allocates only when a new domain, source or interval
 * appears (once per transaction at most). */
#ifndef FERRY_MY_GTID_H
#define FERRY_MY_GTID_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ferry/core.h"
#include "ferry/error.h"

enum ferry_my_gtid_flavor { FERRY_MY_GTID_NONE = 0, FERRY_MY_GTID_MARIADB, FERRY_MY_GTID_MYSQL };

struct ferry_my_gtid_domain {
    uint32_t domain, server;
    uint64_t seq;
};
struct ferry_my_gtid_interval {
    uint64_t lo, hi; /* inclusive */
};
struct ferry_my_gtid_source {
    uint8_t uuid[16];
    struct ferry_my_gtid_interval *iv; /* sorted, disjoint, not adjacent */
    int n, cap;
};

struct ferry_my_gtid_set {
    enum ferry_my_gtid_flavor flavor;
    struct ferry_my_gtid_domain *dom; /* sorted by domain */
    int n_dom, cap_dom;
    struct ferry_my_gtid_source *src; /* sorted by uuid */
    int n_src, cap_src;
};

void ferry__my_gtid_init(struct ferry_my_gtid_set *g);
/* Frees what g holds and leaves it empty (flavor NONE). Accepts an initialised empty set. */
void ferry__my_gtid_release(struct ferry_my_gtid_set *g);
/* Replaces g with the text's set: "" or NULL is the empty set; a ':' means MySQL's form,
 * otherwise MariaDB's. FERRY_EINVAL names the text (cut at 100 characters); g is then empty. */
int ferry__my_gtid_parse(struct ferry_my_gtid_set *g, const char *text, struct ferry_error *err);
/* The canonical text (MariaDB: by domain; MySQL: by uuid, lower case, `a-b` or `a`). */
int ferry__my_gtid_format(const struct ferry_my_gtid_set *g, struct ferry_buf *out);
/* A committed transaction. Mixing flavors is FERRY_EINVAL. */
int ferry__my_gtid_add_mariadb(struct ferry_my_gtid_set *g, uint32_t domain, uint32_t server,
                               uint64_t seq, struct ferry_error *err);
int ferry__my_gtid_add_mysql(struct ferry_my_gtid_set *g, const uint8_t uuid[16], uint64_t gno,
                             struct ferry_error *err);
/* Event bodies (after the 19-byte header, without a checksum trailer). */
int ferry__my_gtid_event_mariadb(const uint8_t *body, size_t n, uint64_t *seq, uint32_t *domain,
                                 uint8_t *flags2, struct ferry_error *err);
int ferry__my_gtid_event_mysql(const uint8_t *body, size_t n, uint8_t uuid[16], uint64_t *gno,
                               struct ferry_error *err);

#endif
