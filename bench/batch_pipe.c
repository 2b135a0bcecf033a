/* bench/batch_pipe.c - the binary COPY pipe, committed batch by batch: what a hand-written
 * per-batch-durable copy costs the servers, with no decoding, digest or encoding at all.
 *
 * A program, not a test. One libpq connection runs READ (a `COPY … TO STDOUT (FORMAT
 * binary)`); a second runs `BEGIN`, WRITE (a `COPY … FROM STDIN (FORMAT binary)`) and
 * passes the source's CopyData messages through unchanged, and after every ROWS rows ends
 * the COPY (binary trailer), runs POSITION if given (the row a resumable copy would commit
 * with its data) and `COMMIT`, then begins the next transaction with the stream's header
 * again. The server sends each row as one message, the binary header in front of the
 * first and the trailer as a message of its own (copyto.c); the header (signature, flags,
 * extension length, extension) is split off the first message and kept. It is the
 * per-batch copy's lower bound on the servers: bench/pg_read_order.sh runs it next to the
 * one-transaction pipe and ferry.
 *
 *   batch_pipe SRC DST READ WRITE ROWS [POSITION [SETUP]]
 * SRC and DST are libpq connection strings. SETUP runs once on the destination before the
 * first transaction (a staging table for bench/pg_upsert.sh's batched anchor, whose POSITION
 * then also moves the staged rows into the table). Prints "ROWS_COPIED TRANSACTIONS" on stdout;
 * exits 1 naming the statement and the server's message on any error. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char trailer[2] = {'\xff', '\xff'};

static void die(PGconn *c, const char *what)
{
    fprintf(stderr, "batch_pipe: %s: %s", what, c ? PQerrorMessage(c) : "failed\n");
    exit(1);
}

static void exec_ok(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != want) die(c, sql);
    PQclear(r);
}

/* Ends the destination's COPY, runs `position` if given and commits. */
static void end_batch(PGconn *dst, const char *position)
{
    if (PQputCopyData(dst, trailer, 2) != 1 || PQputCopyEnd(dst, NULL) != 1) die(dst, "COPY end");
    PGresult *r;
    while ((r = PQgetResult(dst)) != NULL) {
        if (PQresultStatus(r) != PGRES_COMMAND_OK) die(dst, "COPY FROM");
        PQclear(r);
    }
    if (position) exec_ok(dst, position, PGRES_COMMAND_OK);
    exec_ok(dst, "COMMIT", PGRES_COMMAND_OK);
}

static void begin_batch(PGconn *dst, const char *write, const char *header, int header_len)
{
    exec_ok(dst, "BEGIN", PGRES_COMMAND_OK);
    exec_ok(dst, write, PGRES_COPY_IN);
    if (PQputCopyData(dst, header, header_len) != 1) die(dst, "COPY header");
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8 || atol(argv[5]) <= 0) {
        fprintf(stderr, "usage: batch_pipe SRC DST READ WRITE ROWS [POSITION [SETUP]]\n");
        return 2;
    }
    const char *read = argv[3], *write = argv[4], *position = argc >= 7 ? argv[6] : NULL;
    long per_txn = atol(argv[5]);
    PGconn *src = PQconnectdb(argv[1]), *dst = PQconnectdb(argv[2]);
    if (PQstatus(src) != CONNECTION_OK) die(src, "source connection");
    if (PQstatus(dst) != CONNECTION_OK) die(dst, "destination connection");
    if (argc == 8) exec_ok(dst, argv[7], PGRES_COMMAND_OK);
    exec_ok(src, read, PGRES_COPY_OUT);

    char *header = NULL;
    int header_len = 0;
    long rows = 0, in_txn = 0, txns = 0;
    for (;;) {
        char *msg = NULL;
        int n = PQgetCopyData(src, &msg, 0);
        if (n == -1) break; /* the COPY is done */
        if (n < 0) die(src, "COPY TO");
        char *row = msg;
        if (header == NULL) { /* the first message: signature, flags, extension, a row */
            if (n < 19) die(NULL, "the binary COPY header");
            const unsigned char *x = (const unsigned char *)msg + 15;
            long ext = (long)x[0] << 24 | x[1] << 16 | x[2] << 8 | x[3];
            if (ext > n - 19) die(NULL, "the binary COPY header's extension");
            header_len = (int)(19 + ext);
            header = malloc((size_t)header_len);
            if (header == NULL) die(NULL, "malloc");
            memcpy(header, msg, (size_t)header_len);
            begin_batch(dst, write, header, header_len);
            row += header_len;
            n -= header_len;
        }
        if (n == 0) { /* a header sent alone */
            PQfreemem(msg);
            continue;
        }
        if (n == 2 && !memcmp(row, trailer, 2)) { /* the source's trailer: the end */
            PQfreemem(msg);
            continue;
        }
        if (in_txn == per_txn) {
            end_batch(dst, position);
            txns++;
            in_txn = 0;
            begin_batch(dst, write, header, header_len);
        }
        if (PQputCopyData(dst, row, n) != 1) die(dst, "COPY row");
        PQfreemem(msg);
        in_txn++;
        rows++;
    }
    PGresult *r = PQgetResult(src);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die(src, read);
    PQclear(r);
    if (header != NULL) {
        end_batch(dst, position);
        txns++;
        free(header);
    }
    printf("%ld %ld\n", rows, txns);
    PQfinish(src);
    PQfinish(dst);
    return 0;
}
