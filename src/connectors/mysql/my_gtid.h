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
 *     Written from the docs only: no MySQL server in the suite. The binary set MySQL's
 *     COM_BINLOG_DUMP_GTID carries (encode/decode, dump_packet below): from the public
 *     client/server protocol documentation ("COM_BINLOG_DUMP_GTID", the SID block).
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

/* Whether every transaction of a is in b (MySQL: by intervals; MariaDB: each domain of a
 * present in b at or past a's seq). An empty a is in every b; flavors differ: false. */
bool ferry__my_gtid_subset(const struct ferry_my_gtid_set *a, const struct ferry_my_gtid_set *b);

/* MySQL's binary GTID set (COM_BINLOG_DUMP_GTID's data, PREVIOUS_GTIDS_LOG_EVENT's body),
 * all integers little-endian: n_sids (8), per source its uuid (16), n_intervals (8), per
 * interval start (8) and end (8, exclusive). encode appends it to out (a MariaDB set is
 * FERRY_EINVAL); decode replaces g (a MySQL set; the tagged form of MySQL 8.3, format byte 1
 * in the top byte of n_sids, and any inconsistency are FERRY_EINVAL). */
int ferry__my_gtid_encode(const struct ferry_my_gtid_set *g, struct ferry_buf *out,
                          struct ferry_error *err);
int ferry__my_gtid_decode(struct ferry_my_gtid_set *g, const uint8_t *p, size_t n,
                          struct ferry_error *err);

/* How a binlog dump is opened. */
enum ferry_my_dump_kind {
    FERRY_MY_DUMP_FILE = 0,     /* COM_BINLOG_DUMP at file:offset */
    FERRY_MY_DUMP_MARIADB_GTID, /* @slave_connect_state, then COM_BINLOG_DUMP */
    FERRY_MY_DUMP_MYSQL_GTID    /* COM_BINLOG_DUMP_GTID with the encoded set */
};
/* The dump for a start after GTID position `gtid` (NULL: by file:offset) on a server that
 * is MariaDB or not: the position's flavor must be the server's ("" is the empty set of
 * either). FERRY_EINVAL names both when they differ or the text does not parse. */
int ferry__my_gtid_dump_kind(bool server_is_mariadb, const char *gtid,
                             enum ferry_my_dump_kind *kind, struct ferry_error *err);
/* COM_BINLOG_DUMP_GTID's payload, command byte (0x1e) first: flags (2) = BINLOG_THROUGH_GTID
 * (4), server_id (4), binlog file name length (4) = 0, no name, position (8) = 4, data
 * length (4), the encoded set. Appended to out. */
int ferry__my_gtid_dump_packet(uint32_t server_id, const struct ferry_my_gtid_set *g,
                               struct ferry_buf *out, struct ferry_error *err);

#endif
