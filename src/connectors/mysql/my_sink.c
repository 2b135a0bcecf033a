/* connectors/mysql/my_sink.c - the `mysql` sink: tables in one MySQL or MariaDB database.
 *
 * Owns the destination connection, the tables it creates (InnoDB, every identifier
 * backquoted, types from ferry's below), the staging table of `replace` and ferry's
 * checkpoint table `_ferry_checkpoints` in the same database, written in the same
 * transaction as the rows. Calls libmariadb through my_common.c, the batch readers and text
 * forms, the batch digest and CRC32-C. Registered in connectors/registry.c; driven by the
 * runner on one thread.
 *
 * Writing. Rows travel as multi-row INSERT statements of at most `statement_bytes` (default
 * 1 MiB, below every server's max_allowed_packet), built from the column buffers into one
 * reused buffer (nothing allocated per row); CRC32-C over exactly the statement bytes sent
 * is the receipt's encoded_crc. `append_method: load_data` sends append (and replace's
 * staging) rows by LOAD DATA LOCAL INFILE from memory instead (one statement per batch, see
 * load_rows); INSERT stays the default because it measured faster (bench/mysql_sink.sh). append:
 * INSERT; upsert: INSERT ... ON DUPLICATE KEY UPDATE every non-key column (rows of one statement
 * apply in order, so the last row of a key wins); merge: consecutive rows of one operation are sent
 * together, deletes as DELETE ... WHERE (key) IN (...), so a batch applies as if its rows ran in
 * order; replace: rows go to
 * `<table>__ferry_staging`, swapped in at commit by one atomic RENAME TABLE.
 *
 * Transactions. per_apply (default): every apply() is one transaction (rows + checkpoint).
 * at_commit: one transaction from begin() to commit(). Commit groups (per_apply only,
 * group_begin .. group_commit): one transaction that the applies between join, for the cdc
 * streams of one source log and for a full read without resume points (a table without a
 * key, committed whole at its end). Inside a group each batch's checkpoint is held and
 * written just before the group's COMMIT. MySQL commits DDL implicitly, so DDL never runs
 * inside one (exec_ddl refuses it; apply writes rows and checkpoints only) and the RENAME of
 * replace runs after the transaction that holds the staging rows and the checkpoints: a
 * crash between them leaves a complete staging table that the resumed attempt swaps in
 * (readers see the old table until then, never half a table).
 *
 * Values are SQL literals: integers and decimals bare, text quoted (the session runs with
 * NO_BACKSLASH_ESCAPES, so only the quote is doubled), binary as X'..', timestamps in UTC.
 * A value MySQL cannot hold (NaN, infinite or -0 floats, a decimal beyond DECIMAL(65,30)) stops
 * the run naming table, column and row; the server runs in strict mode, so a value it would
 * truncate is an error too. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "connectors/mysql/my_common.h"
#include "ferry/connector.h"
#include "ferry/crc32c.h"
#include "ferry/digest.h"

#define WHAT "mysql sink"
#define CKPT "_ferry_checkpoints"

static const char *const sink_tuning_keys[] = {"durability",      "connect_timeout", "io_timeout",
                                               "statement_bytes", "append_method",   NULL};
static const char *const durability_words[] = {"per_apply", "at_commit", NULL};
static const char *const append_words[] = {"load_data", "insert", NULL};

struct target {
    bool used;
    char *resource, *table, *staging;
    char *qtable, *qstaging; /* `db`.`t` */
    struct ferry_schema *schema;
    enum ferry_write_mode mode;
    char *insert_head; /* INSERT INTO x (cols) VALUES */
    char *upsert_tail; /* ON DUPLICATE KEY UPDATE ... (upsert, merge) */
    char *delete_head; /* DELETE FROM x WHERE (keys) IN ( (merge) */
    char *load_sql;    /* LOAD DATA LOCAL INFILE ... (append, replace) */
    char uri[512];
};

/* The checkpoint of a batch applied inside a commit group: the latest per (resource, shard),
 * written just before the group's COMMIT. */
struct held_checkpoint {
    char *resource, *position;
    int shard;
    int64_t rows, bytes, batches; /* what the batches it stands for add to the row's run counts */
};

struct sink {
    const char *collation; /* binary and NO PAD: keys differing in trailing spaces differ */
    MYSQL *c;
    struct ferry_my_conn conn;
    bool at_commit;
    int64_t statement_bytes;
    struct target *t;
    int n_t;
    char *pipeline;
    int64_t run_id;
    bool session, in_tx; /* in_tx: at_commit's transaction, or a commit group's */
    bool group;          /* the open transaction is a commit group's */
    struct held_checkpoint *held;
    bool ckpt_counts; /* CKPT has the run_* count columns (ensure_checkpoint_table) */
    int n_held, cap_held;
    struct ferry_buf sql;
    uint32_t crc;          /* of the statements of the current apply */
    bool load;             /* append/replace by LOAD DATA LOCAL INFILE (`append_method`) */
    struct ferry_buf data; /* the rows of one LOAD DATA, tab-separated */
    size_t data_off;       /* what the infile handler has handed out */
    bool data_armed;       /* a LOAD DATA of ours is running: the handler serves `data` */
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "mysql", WHAT ": out of memory");
}

/* ---- open / close --------------------------------------------------------------------- */

static void free_target(struct target *t)
{
    ferry_free(t->resource);
    ferry_free(t->table);
    ferry_free(t->staging);
    ferry_free(t->qtable);
    ferry_free(t->qstaging);
    ferry_free(t->insert_head);
    ferry_free(t->upsert_tail);
    ferry_free(t->delete_head);
    ferry_free(t->load_sql);
    ferry_schema_unref(t->schema);
}

static void drop_held(struct sink *s)
{
    for (int i = 0; i < s->n_held; i++) {
        ferry_free(s->held[i].resource);
        ferry_free(s->held[i].position);
    }
    s->n_held = 0;
}

static void sink_close(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL) return;
    drop_held(s);
    ferry_free(s->held);
    if (s->c) mysql_close(s->c);
    ferry__my_conn_free(&s->conn);
    for (int i = 0; i < s->n_t; i++)
        free_target(&s->t[i]);
    ferry_free(s->t);
    ferry_free(s->pipeline);
    ferry_buf_release(&s->sql);
    ferry_buf_release(&s->data);
    ferry_free(s);
}

static int sink_open(struct ferry_cfg *cfg, void **ctx, struct ferry_error *err)
{
    struct sink *s = ferry_calloc(1, sizeof *s);
    if (s == NULL) return oom(err);
    ferry_buf_init(&s->sql, 0);
    s->statement_bytes = 1 << 20;
    int durability = 0;
    int rc = ferry__my_read_conn_config(cfg, WHAT, &s->conn, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "durability", false, durability_words, &durability, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_size(cfg, "statement_bytes", false, &s->statement_bytes, err);
    if (rc == FERRY_OK && (s->statement_bytes < 4096 || s->statement_bytes > (64 << 20)))
        rc = ferry_cfg_error(err, ferry_cfg_get(cfg, "statement_bytes"),
                             "statement_bytes: between 4KiB and 64MiB");
    int method = 1; /* insert: measured faster here (bench/mysql_sink.sh, docs) */
    if (rc == FERRY_OK)
        rc = ferry_cfg_enum(cfg, "append_method", false, append_words, &method, err);
    s->load = method == 0;
    s->conn.local_infile = s->load;
    ferry_buf_init(&s->data, 0);
    if (rc != FERRY_OK) {
        sink_close(s);
        return rc;
    }
    s->at_commit = durability == 1;
    *ctx = s;
    return FERRY_OK;
}

/* The LOAD DATA LOCAL INFILE handler: serves the rows in s->data while a LOAD DATA of this
 * sink runs, and nothing else: a server that asks for a file (the file name is ignored)
 * outside of it gets an error, never a file of this machine. */
static int infile_init(void **ptr, const char *name, void *userdata)
{
    (void)name;
    struct sink *s = userdata;
    *ptr = s;
    s->data_off = 0;
    return s->data_armed ? 0 : 1;
}

static int infile_read(void *ptr, char *buf, unsigned int len)
{
    struct sink *s = ptr;
    size_t n = s->data.len - s->data_off;
    if (n > len) n = len;
    if (n > 0) memcpy(buf, s->data.data + s->data_off, n);
    s->data_off += n;
    return (int)n;
}

static void infile_end(void *ptr)
{
    (void)ptr;
}

static int infile_error(void *ptr, char *buf, unsigned int len)
{
    (void)ptr;
    snprintf(buf, len, "ferry serves no local file but the rows of its own LOAD DATA");
    return 2068; /* CR_LOAD_DATA_LOCAL_INFILE_REJECTED */
}

/* Connects on first use: a pipeline refused at plan time touches no database. */
static int connect_db(struct sink *s, struct ferry_error *err)
{
    if (s->c != NULL) return FERRY_OK;
    int rc = ferry__my_connect(&s->conn, WHAT, &s->c, err);
    /* Strict: a value the column cannot hold is an error, never a silent truncation. */
    if (rc == FERRY_OK)
        rc = ferry__my_exec(s->c,
                            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,"
                            "NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
                            "NO_ENGINE_SUBSTITUTION', SESSION autocommit = 1",
                            FERRY_ESINK, WHAT ": session setup", err);
    if (rc == FERRY_OK)
        mysql_set_local_infile_handler(s->c, infile_init, infile_read, infile_end, infile_error, s);
    if (rc == FERRY_OK) {
        const char *v = mysql_get_server_info(s->c);
        unsigned long ver = mysql_get_server_version(s->c);
        s->collation = v && strstr(v, "MariaDB") ? "utf8mb4_nopad_bin"
                       : ver >= 80000            ? "utf8mb4_0900_bin"
                                                 : "utf8mb4_bin";
    }
    return rc;
}

static void sink_capabilities(void *ctx, enum ferry_write_mode mode, struct ferry_sink_caps *caps)
{
    struct sink *s = ctx;
    caps->write_modes = (1u << FERRY_WRITE_APPEND) | (1u << FERRY_WRITE_REPLACE) |
                        (1u << FERRY_WRITE_UPSERT) | (1u << FERRY_WRITE_MERGE);
    caps->durability = (s->at_commit || mode == FERRY_WRITE_REPLACE) ? FERRY_DURABLE_AT_COMMIT
                                                                     : FERRY_DURABLE_PER_APPLY;
    caps->encoded_integrity = true;
    caps->transactional_checkpoint = true;
    caps->atomic_replace = true;
    caps->replace_commits_once = true;
    caps->deletes = true;
    caps->soft_deletes = false;
    /* DATE/DATETIME hold years 1..9999, DOUBLE no NaN or infinity, decimal text goes to
     * DECIMAL(65,30) (put_value refuses the rest under on_unrepresentable: fail) */
    caps->values.calendar = true;
    caps->values.no_nan = true;
    caps->values.no_infinity = true;
    caps->values.no_negative_zero = true;
    caps->values.decimal_int_digits = 35;
    caps->values.decimal_frac_digits = 30;
}

static int exec(struct sink *s, const char *sql, const char *what, struct ferry_error *err)
{
    int rc = ferry__my_exec(s->c, sql, FERRY_ESINK, what, err);
    return rc == FERRY_OK ? rc : ferry_error_prefix(err, "%s", s->conn.peer);
}

/* ---- DDL ------------------------------------------------------------------------------ */

/* MySQL and MariaDB commit an open transaction implicitly before (and after) CREATE TABLE,
 * DROP TABLE, RENAME TABLE: inside at_commit's transaction or a commit group that would make
 * the rows written so far durable without their checkpoints, or with only some of them. So
 * DDL runs only outside a transaction (prepare, begin before START TRANSACTION, commit after
 * COMMIT); anything else is a bug, refused here rather than committed half-way. */
static int exec_ddl(struct sink *s, const char *sql, const char *what, struct ferry_error *err)
{
    if (s->in_tx)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               "%s: refused inside an open transaction (DDL would commit it "
                               "implicitly)",
                               what);
    return exec(s, sql, what, err);
}

/* ferry type -> column type (docs/connectors.md, "mysql sink"). Key columns of variable
 * width get a bounded type: InnoDB cannot index LONGTEXT whole. */
static void column_type(const struct ferry_field *f, char *buf, size_t len)
{
    bool key = f->key_pos > 0;
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        snprintf(buf, len, "BOOLEAN");
        break;
    case FERRY_TYPE_INT8:
        snprintf(buf, len, "TINYINT");
        break;
    case FERRY_TYPE_INT16:
        snprintf(buf, len, "SMALLINT");
        break;
    case FERRY_TYPE_INT32:
        snprintf(buf, len, "INT");
        break;
    case FERRY_TYPE_INT64:
        snprintf(buf, len, "BIGINT");
        break;
    case FERRY_TYPE_FLOAT32:
        snprintf(buf, len, "FLOAT");
        break;
    case FERRY_TYPE_FLOAT64:
        snprintf(buf, len, "DOUBLE");
        break;
    case FERRY_TYPE_DECIMAL128:
        snprintf(buf, len, "DECIMAL(%d,%d)", f->precision, f->scale);
        break;
    case FERRY_TYPE_DECIMAL_TEXT:
        snprintf(buf, len, "DECIMAL(65,30)");
        break;
    case FERRY_TYPE_UTF8:
        snprintf(buf, len, key ? "VARCHAR(255)" : "LONGTEXT");
        break;
    case FERRY_TYPE_JSON:
        snprintf(buf, len, "JSON");
        break;
    case FERRY_TYPE_BINARY:
        snprintf(buf, len, key ? "VARBINARY(255)" : "LONGBLOB");
        break;
    case FERRY_TYPE_DATE32:
        snprintf(buf, len, "DATE");
        break;
    case FERRY_TYPE_TIME64_US:
        snprintf(buf, len, "TIME(6)");
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        snprintf(buf, len, "DATETIME(6)");
        break;
    case FERRY_TYPE_UUID:
        snprintf(buf, len, "CHAR(36) CHARACTER SET ascii");
        break;
    default:
        snprintf(buf, len, "LONGBLOB");
        break;
    }
}

static int check_types(const struct ferry_schema *sc, const char *table, struct ferry_error *err)
{
    for (int i = 0; i < sc->n_fields; i++) {
        const struct ferry_field *f = &sc->fields[i];
        if (f->type == FERRY_TYPE_DECIMAL128 &&
            (f->scale < 0 || f->scale > 30 || f->precision > 65 || f->scale > f->precision))
            return ferry_error_set(err, FERRY_EUNSUPPORTED, "mysql",
                                   WHAT ": table %s, column \"%s\": decimal(%d,%d) does not fit "
                                        "MySQL's DECIMAL (precision <= 65, scale 0..30)",
                                   table, f->name, f->precision, f->scale);
    }
    return FERRY_OK;
}

static int key_list(struct ferry_buf *b, const struct ferry_schema *sc, struct ferry_error *err)
{
    int rc = FERRY_OK;
    for (int k = 0; k < sc->n_key && rc == FERRY_OK; k++) {
        if (k > 0 && ferry_buf_append(b, ", ", 2) != FERRY_OK) return oom(err);
        rc = ferry__my_quote_ident(b, sc->fields[sc->key[k]].name, err);
    }
    return rc;
}

static int table_exists(struct sink *s, const char *table, bool *exists, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                                  "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &b, table, strlen(table));
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return oom(err);
    }
    MYSQL_RES *r = NULL;
    if (mysql_real_query(s->c, b.data, b.len) != 0 || (r = mysql_store_result(s->c)) == NULL)
        rc = ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: table %s", s->conn.peer, table);
    ferry_buf_release(&b);
    if (rc != FERRY_OK) return rc;
    MYSQL_ROW row = mysql_fetch_row(r);
    *exists = row && row[0] && (int)strtol(row[0], NULL, 10) > 0;
    mysql_free_result(r);
    return FERRY_OK;
}

static int create_table(struct sink *s, const char *qname, const struct ferry_schema *sc,
                        bool with_key, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "CREATE TABLE IF NOT EXISTS %s (", qname);
    char type[64];
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        const struct ferry_field *f = &sc->fields[i];
        if (i > 0) rc = ferry_buf_append(&b, ", ", 2);
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, f->name, err);
        column_type(f, type, sizeof type);
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(&b, " %s%s", type,
                                  f->nullable && f->key_pos == 0 ? "" : " NOT NULL");
    }
    if (rc == FERRY_OK && with_key && sc->n_key > 0) {
        rc = ferry_buf_printf(&b, ", PRIMARY KEY (");
        if (rc == FERRY_OK) rc = key_list(&b, sc, err);
        if (rc == FERRY_OK) rc = ferry_buf_append(&b, ")", 1);
    }
    if (rc == FERRY_OK)
        rc = ferry_buf_printf(&b, ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=%s",
                              s->collation);
    if (rc == FERRY_ENOMEM) rc = oom(err);
    char what[300];
    snprintf(what, sizeof what, WHAT ": creating table %s", qname);
    if (rc == FERRY_OK) rc = exec_ddl(s, b.data, what, err);
    ferry_buf_release(&b);
    return rc;
}

static int drop_table(struct sink *s, const char *qname, struct ferry_error *err)
{
    char *sql = ferry_asprintf("DROP TABLE IF EXISTS %s", qname);
    if (sql == NULL) return oom(err);
    int rc = exec_ddl(s, sql, WHAT ": dropping a staging table", err);
    ferry_free(sql);
    return rc;
}

static char *qualify(struct sink *s, const char *table, struct ferry_error *err)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry__my_quote_ident(&b, s->conn.db, err);
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ".", 1) == FERRY_OK ? FERRY_OK : oom(err);
    if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, table, err);
    char *out = rc == FERRY_OK ? ferry_buf_take(&b) : NULL;
    ferry_buf_release(&b);
    return out;
}

/* LOAD DATA LOCAL INFILE 'ferry' INTO TABLE x CHARACTER SET utf8mb4, fields separated by a
 * tab, rows by a newline, escapes by a backslash (hex literals: the session's
 * NO_BACKSLASH_ESCAPES leaves them alone); binary columns travel as hex through a user
 * variable and UNHEX(). */
static int build_load_sql(struct target *t, const char *into, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b,
                              "LOAD DATA LOCAL INFILE 'ferry' INTO TABLE %s CHARACTER SET "
                              "utf8mb4 FIELDS TERMINATED BY X'09' ESCAPED BY X'5c' LINES "
                              "TERMINATED BY X'0a' (",
                              into);
    bool any_hex = false;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_append(&b, ", ", 2);
        if (rc != FERRY_OK) break;
        if (sc->fields[i].type == FERRY_TYPE_BINARY) {
            rc = ferry_buf_printf(&b, "@ferry_h%d", i);
            any_hex = true;
        } else {
            rc = ferry__my_quote_ident(&b, sc->fields[i].name, err);
        }
    }
    if (rc == FERRY_OK) rc = ferry_buf_append(&b, ")", 1);
    bool first = true;
    for (int i = 0; any_hex && i < sc->n_fields && rc == FERRY_OK; i++) {
        if (sc->fields[i].type != FERRY_TYPE_BINARY) continue;
        rc = ferry_buf_printf(&b, first ? " SET " : ", ");
        first = false;
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, sc->fields[i].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " = UNHEX(@ferry_h%d)", i);
    }
    if (rc == FERRY_OK && (t->load_sql = ferry_buf_take(&b)) == NULL) rc = FERRY_ENOMEM;
    ferry_buf_release(&b);
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

static int build_sql(struct target *t, const char *into, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc = ferry_buf_printf(&b, "INSERT INTO %s (", into);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (i > 0) rc = ferry_buf_append(&b, ", ", 2);
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, sc->fields[i].name, err);
    }
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ") VALUES ");
    if (rc == FERRY_OK && (t->insert_head = ferry_buf_take(&b)) == NULL) rc = oom(err);
    ferry_buf_release(&b);
    if (rc == FERRY_OK && (t->mode == FERRY_WRITE_APPEND || t->mode == FERRY_WRITE_REPLACE))
        rc = build_load_sql(t, into, err);
    if (rc != FERRY_OK || (t->mode != FERRY_WRITE_UPSERT && t->mode != FERRY_WRITE_MERGE))
        return rc == FERRY_ENOMEM ? oom(err) : rc;
    ferry_buf_init(&b, 0);
    rc = ferry_buf_printf(&b, " ON DUPLICATE KEY UPDATE ");
    bool any = false;
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        if (sc->fields[i].key_pos > 0) continue;
        if (any) rc = ferry_buf_append(&b, ", ", 2);
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, sc->fields[i].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " = VALUES(");
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, sc->fields[i].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_append(&b, ")", 1);
        any = true;
    }
    if (rc == FERRY_OK && !any) { /* only key columns: a duplicate changes nothing */
        rc = ferry__my_quote_ident(&b, sc->fields[sc->key[0]].name, err);
        if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " = ");
        if (rc == FERRY_OK) rc = ferry__my_quote_ident(&b, sc->fields[sc->key[0]].name, err);
    }
    if (rc == FERRY_OK && (t->upsert_tail = ferry_buf_take(&b)) == NULL) rc = oom(err);
    ferry_buf_release(&b);
    if (rc != FERRY_OK || t->mode != FERRY_WRITE_MERGE) return rc == FERRY_ENOMEM ? oom(err) : rc;
    ferry_buf_init(&b, 0);
    rc = ferry_buf_printf(&b, "DELETE FROM %s WHERE (", into);
    if (rc == FERRY_OK) rc = key_list(&b, sc, err);
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, ") IN (");
    if (rc == FERRY_OK && (t->delete_head = ferry_buf_take(&b)) == NULL) rc = oom(err);
    ferry_buf_release(&b);
    return rc == FERRY_ENOMEM ? oom(err) : rc;
}

/* upsert and merge rely on ON DUPLICATE KEY: an existing table must have a unique index
 * (or its primary key) on exactly the key columns, or rows would silently pile up. */
static int check_unique_key(struct sink *s, const struct target *t, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    int rc =
        ferry_buf_printf(&b, "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
                             "WHERE TABLE_SCHEMA = DATABASE() AND NON_UNIQUE = 0 AND "
                             "TABLE_NAME = ");
    if (rc == FERRY_OK) rc = ferry__my_quote_text(s->c, &b, t->table, strlen(t->table));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&b, " ORDER BY INDEX_NAME");
    if (rc != FERRY_OK) {
        ferry_buf_release(&b);
        return oom(err);
    }
    MYSQL_RES *r = NULL;
    if (mysql_real_query(s->c, b.data, b.len) != 0 || (r = mysql_store_result(s->c)) == NULL)
        rc =
            ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: table %s", s->conn.peer, t->qtable);
    ferry_buf_release(&b);
    if (rc != FERRY_OK) return rc;
    /* One index at a time: all its columns in the key, as many as the key has. */
    bool found = false;
    char index[200] = "";
    int cols = 0, hits = 0;
    MYSQL_ROW row;
    while (!found) {
        row = mysql_fetch_row(r);
        if (row == NULL || strcmp(row[0], index) != 0) {
            if (index[0] && cols == sc->n_key && hits == sc->n_key) found = true;
            if (row == NULL) break;
            snprintf(index, sizeof index, "%s", row[0]);
            cols = hits = 0;
        }
        cols++;
        for (int k = 0; k < sc->n_key; k++)
            if (row[1] && strcasecmp(row[1], sc->fields[sc->key[k]].name) == 0) hits++;
    }
    mysql_free_result(r);
    if (found) return FERRY_OK;
    return ferry_error_set(err, FERRY_EPOLICY, "mysql",
                           WHAT
                           ": table %s exists without a primary key or unique index on the "
                           "key columns; write %s needs one (ALTER TABLE ... ADD PRIMARY KEY, or "
                           "let ferry create the table)",
                           t->qtable, ferry_write_mode_name(t->mode));
}

static int sink_prepare(void *ctx, const struct ferry_target *target, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (target->index < 0)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": bad target index %d",
                               target->index);
    if (target->index >= s->n_t) {
        struct target *nt = ferry_realloc(s->t, sizeof *nt * (size_t)(target->index + 1));
        if (nt == NULL) return oom(err);
        memset(nt + s->n_t, 0, sizeof *nt * (size_t)(target->index + 1 - s->n_t));
        s->t = nt;
        s->n_t = target->index + 1;
    }
    struct target *t = &s->t[target->index];
    if (t->used)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": target %d prepared twice",
                               target->index);
    const struct ferry_schema *sc = target->schema;
    bool keyed = target->mode == FERRY_WRITE_UPSERT || target->mode == FERRY_WRITE_MERGE;
    if (keyed && sc->n_key == 0)
        return ferry_error_set(err, FERRY_EPOLICY, "mysql",
                               WHAT ": table \"%s\": write %s needs a key and resource %s has none",
                               target->table, ferry_write_mode_name(target->mode),
                               target->resource);
    int rc = check_types(sc, target->table, err);
    if (rc != FERRY_OK) return rc;
    t->used = true;
    t->mode = target->mode;
    t->schema = ferry_schema_ref(target->schema);
    t->resource = ferry_strdup(target->resource ? target->resource : "");
    t->table = ferry_strdup(target->table);
    if (!t->resource || !t->table) return oom(err);
    struct ferry_buf q;
    ferry_buf_init(&q, 0);
    for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
        rc = ferry__my_quote_ident(&q, sc->fields[i].name, err);
        ferry_buf_reset(&q);
    }
    ferry_buf_release(&q);
    if (rc != FERRY_OK) return ferry_error_prefix(err, WHAT ": table \"%s\": column", t->table);
    if ((t->qtable = qualify(s, t->table, err)) == NULL)
        return ferry_error_prefix(err, WHAT ": table");
    if (t->mode == FERRY_WRITE_REPLACE) {
        t->staging = ferry_asprintf("%s__ferry_staging", t->table);
        if (t->staging == NULL) return oom(err);
        if ((t->qstaging = qualify(s, t->staging, err)) == NULL)
            return ferry_error_prefix(err, WHAT ": table \"%s\": its replace staging table",
                                      t->table);
    }
    snprintf(t->uri, sizeof t->uri, "mysql:%s.%s", s->conn.db, t->table);
    rc = connect_db(s, err);
    if (rc == FERRY_OK && t->mode != FERRY_WRITE_REPLACE)
        rc = create_table(s, t->qtable, sc, true, err);
    if (rc == FERRY_OK && keyed) rc = check_unique_key(s, t, err);
    if (rc == FERRY_OK)
        rc = build_sql(t, t->mode == FERRY_WRITE_REPLACE ? t->qstaging : t->qtable, err);
    return rc;
}

/* ---- begin ---------------------------------------------------------------------------- */

/* Whether the checkpoint table has the run_* count columns (a table an older ferry made
 * has not). */
static int checkpoint_counts(struct sink *s, bool *counts, struct ferry_error *err)
{
    static const char sql[] = "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE "
                              "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" CKPT "' AND "
                              "COLUMN_NAME = 'run_batches'";
    MYSQL_RES *r = NULL;
    if (mysql_real_query(s->c, sql, sizeof sql - 1) != 0 || (r = mysql_store_result(s->c)) == NULL)
        return ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: table " CKPT, s->conn.peer);
    MYSQL_ROW row = mysql_fetch_row(r);
    *counts = row && row[0] && strtol(row[0], NULL, 10) > 0;
    mysql_free_result(r);
    return FERRY_OK;
}

/* The run_* columns are nullable: NULL is "not counted" (rows an older ferry wrote). A user
 * that may write the table but not alter it keeps it as it is, without counts; another
 * lane adding the columns first is no error. */
static int ensure_checkpoint_table(struct sink *s, struct ferry_error *err)
{
    int rc = exec_ddl(s,
                      "CREATE TABLE IF NOT EXISTS `" CKPT "` (pipeline VARCHAR(190) NOT NULL, "
                      "resource VARCHAR(500) NOT NULL, shard INT NOT NULL, run_id BIGINT NOT "
                      "NULL, position LONGTEXT, updated_at DATETIME(6) NOT NULL, run_rows BIGINT "
                      "NULL, run_bytes BIGINT NULL, run_batches BIGINT NULL, "
                      "PRIMARY KEY (pipeline, resource, shard)) ENGINE=InnoDB DEFAULT "
                      "CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
                      WHAT ": creating table " CKPT, err);
    bool counts = false;
    if (rc == FERRY_OK) rc = checkpoint_counts(s, &counts, err);
    if (rc != FERRY_OK) return rc;
    s->ckpt_counts = true;
    if (counts) return FERRY_OK;
    struct ferry_error e;
    if (exec_ddl(s,
                 "ALTER TABLE `" CKPT "` ADD COLUMN run_rows BIGINT NULL, ADD COLUMN run_bytes "
                 "BIGINT NULL, ADD COLUMN run_batches BIGINT NULL",
                 WHAT ": adding the run counts to " CKPT, &e) != FERRY_OK &&
        mysql_errno(s->c) != 1060 /* ER_DUP_FIELDNAME */) {
        s->ckpt_counts = false;
        ferry_log(FERRY_LOG_WARN,
                  "%s; checkpoints are written without them: after a crash, the run's "
                  "counters may miss the batches committed just before it",
                  e.message);
    }
    return FERRY_OK;
}

static int sink_begin(void *ctx, const struct ferry_session_info *run, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (s->session)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": session already open");
    ferry_free(s->pipeline);
    s->pipeline = ferry_strdup(run && run->pipeline ? run->pipeline : "");
    if (s->pipeline == NULL) return oom(err);
    s->run_id = run ? run->run_id : 0;
    int rc = connect_db(s, err);
    if (rc == FERRY_OK) rc = ensure_checkpoint_table(s, err);
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++) {
        struct target *t = &s->t[i];
        if (!t->used || t->mode != FERRY_WRITE_REPLACE) continue;
        /* A later attempt of the same run keeps the rows its checkpoints account for. */
        if (!(run && run->resuming)) rc = drop_table(s, t->qstaging, err);
        if (rc == FERRY_OK) rc = create_table(s, t->qstaging, t->schema, true, err);
    }
    if (rc == FERRY_OK && s->at_commit) {
        rc = exec(s, "START TRANSACTION", WHAT ": begin", err);
        if (rc == FERRY_OK) s->in_tx = true;
    }
    if (rc != FERRY_OK) return rc;
    s->session = true;
    return FERRY_OK;
}

/* ---- values --------------------------------------------------------------------------- */

static int bad_value(struct target *t, int col, int64_t row, const char *why,
                     struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ESINK, "mysql",
                           WHAT ": table %s, column \"%s\", row %" PRId64 " of the batch: %s",
                           t->qtable, t->schema->fields[col].name, row, why);
}

/* A decimal text MySQL's DECIMAL(65,30) holds exactly: at most 35 integer digits and 30
 * fraction digits (trailing zeros aside), no NaN or infinity. */
static bool decimal_fits(const char *p, size_t n)
{
    size_t i = 0, ints = 0, frac = 0, zeros = 0;
    if (i < n && (p[i] == '-' || p[i] == '+')) i++;
    while (i < n && p[i] == '0')
        i++;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
        ints++;
    if (i < n && p[i] == '.') {
        i++;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
            frac++;
            zeros = p[i] == '0' ? zeros + 1 : 0;
        }
    }
    return i == n && n > 0 && ints <= 35 && frac - zeros <= 30;
}

static int put_text(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    if (ferry_buf_reserve(b, 2 * n + 3) != FERRY_OK) return FERRY_ENOMEM;
    char *o = b->data + b->len;
    *o++ = '\'';
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\'') *o++ = '\'';
        *o++ = (char)p[i];
    }
    *o++ = '\'';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return FERRY_OK;
}

static int put_hex(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (ferry_buf_reserve(b, 2 * n + 3) != FERRY_OK) return FERRY_ENOMEM;
    char *o = b->data + b->len;
    *o++ = 'X';
    *o++ = '\'';
    for (size_t i = 0; i < n; i++) {
        *o++ = hex[p[i] >> 4];
        *o++ = hex[p[i] & 15];
    }
    *o++ = '\'';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return FERRY_OK;
}

/* One value as a literal appended to b. */
static int put_value(struct target *t, const struct ferry_batch *bt, int c, int64_t r,
                     struct ferry_buf *b, struct ferry_error *err)
{
    if (ferry_col_is_null(bt, c, r)) return ferry_buf_append(b, "NULL", 4);
    const struct ferry_field *f = &t->schema->fields[c];
    char tmp[96];
    int n;
    switch (f->type) {
    case FERRY_TYPE_BOOL:
        return ferry_buf_append(b, ferry_col_bool(bt, c, r) ? "1" : "0", 1);
    case FERRY_TYPE_INT8:
    case FERRY_TYPE_INT16:
    case FERRY_TYPE_INT32:
    case FERRY_TYPE_INT64:
        return ferry_buf_printf(b, "%" PRId64, ferry_col_int(bt, c, r));
    case FERRY_TYPE_FLOAT32:
    case FERRY_TYPE_FLOAT64: {
        double v = ferry_col_float(bt, c, r);
        if (!isfinite(v)) return bad_value(t, c, r, "MySQL has no NaN or infinite floats", err);
        if (v == 0 && signbit(v))
            return bad_value(t, c, r, "float -0 cannot be stored exactly (MariaDB keeps it as 0)",
                             err);
        /* An exponent makes it an approximate-value (double) literal, never a DECIMAL. A
         * float is printed as its exact double too: the server reads a literal as a double,
         * then narrows it to FLOAT, and "%.9g" of FLT_MAX reads back above FLT_MAX (error
         * 1264), of other floats possibly rounded twice. */
        n = snprintf(tmp, sizeof tmp, "%.17g", v);
        if (strchr(tmp, 'e') == NULL) n += snprintf(tmp + n, sizeof tmp - (size_t)n, "e0");
        return ferry_buf_append(b, tmp, (size_t)n);
    }
    case FERRY_TYPE_DECIMAL128:
        n = ferry_decimal128_to_text(ferry_col_dec128(bt, c, r), f->scale, tmp, sizeof tmp);
        if (n < 0) return bad_value(t, c, r, "decimal not printable", err);
        return ferry_buf_append(b, tmp, (size_t)n);
    case FERRY_TYPE_DECIMAL_TEXT: {
        size_t len;
        const uint8_t *p = ferry_col_bytes(bt, c, r, &len);
        if (!decimal_fits((const char *)p, len))
            return bad_value(t, c, r, "decimal does not fit DECIMAL(65,30) exactly", err);
        return ferry_buf_append(b, p, len);
    }
    case FERRY_TYPE_DATE32:
        n = ferry_date32_to_text((int32_t)ferry_col_int(bt, c, r), tmp + 1, sizeof tmp - 2);
        break;
    case FERRY_TYPE_TIME64_US:
        n = ferry_time64_to_text(ferry_col_int(bt, c, r), tmp + 1, sizeof tmp - 2);
        break;
    case FERRY_TYPE_TIMESTAMP_US:
    case FERRY_TYPE_TIMESTAMPTZ_US:
        n = ferry_timestamp_to_text(ferry_col_int(bt, c, r), false, tmp + 1, sizeof tmp - 2);
        break;
    case FERRY_TYPE_UUID:
        n = ferry_uuid_to_text(ferry_col_fixed(bt, c, r), tmp + 1, sizeof tmp - 2);
        break;
    case FERRY_TYPE_BINARY: {
        size_t len;
        const uint8_t *p = ferry_col_bytes(bt, c, r, &len);
        return put_hex(b, p, len);
    }
    default: { /* utf8, json */
        size_t len;
        const uint8_t *p = ferry_col_bytes(bt, c, r, &len);
        return put_text(b, p, len);
    }
    }
    if (n < 0) return bad_value(t, c, r, "date or time outside years 1..9999", err);
    tmp[0] = '\'';
    tmp[n + 1] = '\'';
    return ferry_buf_append(b, tmp, (size_t)n + 2);
}

/* ---- append by LOAD DATA LOCAL INFILE ----------------------------------------------------- */

/* text with the file's escapes: backslash, tab, newline, carriage return and NUL */
static int put_escaped(struct ferry_buf *b, const uint8_t *p, size_t n)
{
    if (ferry_buf_reserve(b, 2 * n + 1) != FERRY_OK) return FERRY_ENOMEM;
    char *o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c == '\\' || c == '\t' || c == '\n' || c == '\r' || c == 0) {
            *o++ = '\\';
            *o++ = c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : c == 0 ? '0' : '\\';
        } else {
            *o++ = (char)c;
        }
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return FERRY_OK;
}

/* One value as a field of the file: what put_value writes, unquoted, NULL as \N. */
static int put_field(struct target *t, const struct ferry_batch *bt, int c, int64_t r,
                     struct ferry_buf *b, struct ferry_error *err)
{
    if (ferry_col_is_null(bt, c, r)) return ferry_buf_append(b, "\\N", 2);
    enum ferry_type ty = t->schema->fields[c].type;
    size_t len;
    if (ty == FERRY_TYPE_UTF8 || ty == FERRY_TYPE_JSON) {
        const uint8_t *p = ferry_col_bytes(bt, c, r, &len);
        return put_escaped(b, p, len);
    }
    if (ty == FERRY_TYPE_BINARY) {
        const uint8_t *p = ferry_col_bytes(bt, c, r, &len);
        int rc = put_hex(b, p, len); /* X'..': the field is the hex between the quotes */
        if (rc != FERRY_OK) return rc;
        memmove(b->data + b->len - 2 * len - 3, b->data + b->len - 2 * len - 1, 2 * len);
        b->len -= 3;
        b->data[b->len] = '\0';
        return FERRY_OK;
    }
    size_t at = b->len;
    int rc = put_value(t, bt, c, r, b, err); /* numbers bare; temporal values and uuids quoted */
    if (rc != FERRY_OK || b->len < at + 2 || b->data[at] != '\'') return rc;
    memmove(b->data + at, b->data + at + 1, b->len - at - 2);
    b->len -= 2;
    b->data[b->len] = '\0';
    return FERRY_OK;
}

/* LOCAL turns the server's data errors into warnings (it cannot stop the client's file
 * mid-way): any warning, or a row count other than the rows sent, is an error here, and the
 * caller rolls the transaction back. */
static int load_check(struct sink *s, struct target *t, int64_t rows, struct ferry_error *err)
{
    my_ulonglong got = mysql_affected_rows(s->c);
    unsigned warnings = mysql_warning_count(s->c);
    if (warnings == 0 && got == (my_ulonglong)rows) return FERRY_OK;
    char first[400] = "";
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    if (warnings > 0 && mysql_query(s->c, "SHOW WARNINGS LIMIT 1") == 0 &&
        (res = mysql_store_result(s->c)) != NULL && (row = mysql_fetch_row(res)) != NULL)
        snprintf(first, sizeof first, ": %s %s: %s", row[0] ? row[0] : "", row[1] ? row[1] : "",
                 row[2] ? row[2] : "");
    if (res) mysql_free_result(res);
    return ferry_error_set(err, FERRY_ESINK, "mysql",
                           WHAT ": %s: LOAD DATA into %s: %" PRId64 " rows sent, %llu written, "
                                "%u warning%s%s (nothing of the batch is kept)",
                           s->conn.peer, t->qtable, rows, (unsigned long long)got, warnings,
                           warnings == 1 ? "" : "s", first);
}

/* Rows [0, b->length) by one LOAD DATA. *refused: the server or the client library does not
 * allow LOCAL (MySQL 8's default local_infile = OFF): nothing was written. */
static int load_rows(struct sink *s, struct target *t, const struct ferry_batch *b, bool *refused,
                     struct ferry_error *err)
{
    *refused = false;
    const struct ferry_schema *sc = t->schema;
    ferry_buf_reset(&s->data);
    for (int64_t r = 0; r < b->length; r++) {
        int rc = FERRY_OK;
        for (int i = 0; i < sc->n_fields && rc == FERRY_OK; i++) {
            if (i > 0) rc = ferry_buf_append(&s->data, "\t", 1);
            if (rc == FERRY_OK) rc = put_field(t, b, i, r, &s->data, err);
        }
        if (rc == FERRY_OK) rc = ferry_buf_append(&s->data, "\n", 1);
        if (rc == FERRY_ENOMEM) return oom(err);
        if (rc != FERRY_OK) return rc;
    }
    s->crc = ferry_crc32c_update(s->crc, t->load_sql, strlen(t->load_sql));
    s->crc = ferry_crc32c_update(s->crc, s->data.data ? s->data.data : "", s->data.len);
    s->data_armed = true;
    int q = mysql_real_query(s->c, t->load_sql, strlen(t->load_sql));
    s->data_armed = false;
    if (q != 0) {
        unsigned e = mysql_errno(s->c);
        /* not allowed (1148), disabled (MariaDB 4166, MySQL 3948), rejected by the client (2068) */
        *refused = e == 1148 || e == 4166 || e == 3948 || e == 2068;
        if (*refused) return FERRY_OK;
        return ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: LOAD DATA into %s", s->conn.peer,
                               t->qtable);
    }
    return load_check(s, t, b->length, err);
}

/* ---- apply ---------------------------------------------------------------------------- */

static int send(struct sink *s, struct target *t, const char *step, struct ferry_error *err)
{
    s->crc = ferry_crc32c_update(s->crc, s->sql.data, s->sql.len);
    if (mysql_real_query(s->c, s->sql.data, s->sql.len) != 0)
        return ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: %s %s", s->conn.peer, step,
                               t->qtable);
    MYSQL_RES *r = mysql_store_result(s->c);
    if (r) mysql_free_result(r);
    return FERRY_OK;
}

/* Rows [from, to) of b, all of one operation, as statements of at most statement_bytes. */
static int write_run(struct sink *s, struct target *t, const struct ferry_batch *b, int64_t from,
                     int64_t to, bool del, struct ferry_error *err)
{
    const struct ferry_schema *sc = t->schema;
    const char *head = del ? t->delete_head : t->insert_head;
    const char *tail = del ? ")" : (t->upsert_tail ? t->upsert_tail : "");
    int64_t r = from;
    while (r < to) {
        ferry_buf_reset(&s->sql);
        if (ferry_buf_append(&s->sql, head, strlen(head)) != FERRY_OK) return oom(err);
        bool first = true;
        for (; r < to && (first || s->sql.len < (size_t)s->statement_bytes); r++) {
            int rc = ferry_buf_append(&s->sql, first ? "(" : ", (", first ? 1 : 3);
            first = false;
            int nc = del ? sc->n_key : sc->n_fields;
            for (int i = 0; i < nc && rc == FERRY_OK; i++) {
                if (i > 0) rc = ferry_buf_append(&s->sql, ", ", 2);
                if (rc == FERRY_OK) rc = put_value(t, b, del ? sc->key[i] : i, r, &s->sql, err);
            }
            if (rc == FERRY_OK) rc = ferry_buf_append(&s->sql, ")", 1);
            if (rc == FERRY_ENOMEM) return oom(err);
            if (rc != FERRY_OK) return rc;
        }
        if (ferry_buf_append(&s->sql, tail, strlen(tail)) != FERRY_OK) return oom(err);
        int rc = send(s, t, del ? "deleting from" : "writing into", err);
        if (rc != FERRY_OK) return rc;
    }
    return FERRY_OK;
}

static int write_rows(struct sink *s, struct target *t, const struct ferry_batch *b,
                      struct ferry_error *err)
{
    if (s->load && t->load_sql != NULL) {
        bool refused = false;
        int rc = load_rows(s, t, b, &refused, err);
        if (rc != FERRY_OK || !refused) return rc;
        ferry_log(FERRY_LOG_WARN,
                  WHAT ": %s: the server refuses LOAD DATA LOCAL INFILE (local_infile = OFF?): "
                       "appending with multi-row INSERT statements from now on",
                  s->conn.peer);
        s->load = false;
        s->crc = 0; /* the receipt covers the statements that wrote */
    }
    if (t->mode != FERRY_WRITE_MERGE) return write_run(s, t, b, 0, b->length, false, err);
    int64_t start = 0;
    while (start < b->length) {
        bool del = ferry_batch_op(b, start) == FERRY_OP_DELETE;
        int64_t end = start + 1;
        while (end < b->length && (ferry_batch_op(b, end) == FERRY_OP_DELETE) == del)
            end++;
        int rc = write_run(s, t, b, start, end, del, err);
        if (rc != FERRY_OK) return rc;
        start = end;
    }
    return FERRY_OK;
}

/* Checkpoint rows in one statement (one per (resource, shard): the rows differ). */
static int put_checkpoints(struct sink *s, const struct held_checkpoint *v, int n,
                           struct ferry_error *err)
{
    ferry_buf_reset(&s->sql);
    int rc = ferry_buf_printf(&s->sql, "INSERT INTO `" CKPT "` (pipeline, resource, shard, run_id, "
                                       "position, updated_at%s) VALUES ",
                              s->ckpt_counts ? ", run_rows, run_bytes, run_batches" : "");
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        rc = ferry_buf_append(&s->sql, i > 0 ? ", (" : "(", i > 0 ? 3 : 1);
        if (rc == FERRY_OK)
            rc = ferry__my_quote_text(s->c, &s->sql, s->pipeline, strlen(s->pipeline));
        if (rc == FERRY_OK) rc = ferry_buf_append(&s->sql, ", ", 2);
        if (rc == FERRY_OK)
            rc = ferry__my_quote_text(s->c, &s->sql, v[i].resource, strlen(v[i].resource));
        if (rc == FERRY_OK)
            rc = ferry_buf_printf(&s->sql, ", %d, %" PRId64 ", ", v[i].shard, s->run_id);
        if (rc == FERRY_OK)
            rc = ferry__my_quote_text(s->c, &s->sql, v[i].position, strlen(v[i].position));
        if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, ", UTC_TIMESTAMP(6)");
        if (rc == FERRY_OK && s->ckpt_counts)
            rc = ferry_buf_printf(&s->sql, ", %" PRId64 ", %" PRId64 ", %" PRId64, v[i].rows,
                                  v[i].bytes, v[i].batches);
        if (rc == FERRY_OK) rc = ferry_buf_append(&s->sql, ")", 1);
    }
    /* The run counts go on while the row's run_id is the run's. The assignments run left to
     * right, each seeing the ones before: run_id is replaced after the counts read it. */
    if (rc == FERRY_OK && s->ckpt_counts)
        rc = ferry_buf_printf(
            &s->sql,
            " ON DUPLICATE KEY UPDATE "
            "run_rows = IF(run_id = VALUES(run_id), run_rows + VALUES(run_rows), VALUES(run_rows)), "
            "run_bytes = IF(run_id = VALUES(run_id), run_bytes + VALUES(run_bytes), "
            "VALUES(run_bytes)), "
            "run_batches = IF(run_id = VALUES(run_id), run_batches + VALUES(run_batches), "
            "VALUES(run_batches)), "
            "run_id = VALUES(run_id), position = VALUES(position), updated_at = VALUES(updated_at)");
    else if (rc == FERRY_OK)
        rc = ferry_buf_printf(&s->sql, " ON DUPLICATE KEY UPDATE run_id = VALUES(run_id), "
                                       "position = VALUES(position), updated_at = "
                                       "VALUES(updated_at)");
    if (rc != FERRY_OK) return oom(err);
    char what[200];
    if (n == 1)
        snprintf(what, sizeof what, WHAT ": saving the checkpoint of resource %.120s",
                 v[0].resource);
    else
        snprintf(what, sizeof what, WHAT ": saving the checkpoints of %d resources and shards", n);
    return exec(s, s->sql.data, what, err);
}

/* Inside a commit group the checkpoint waits for its COMMIT (flush_held): one statement for
 * the group instead of one per batch and table (a key-less table's copy: one per 2000 rows
 * by default; a cdc cut: one per table). */
static int hold_checkpoint(struct sink *s, const struct held_checkpoint *b, struct ferry_error *err)
{
    for (int i = 0; i < s->n_held; i++) {
        struct held_checkpoint *c = &s->held[i];
        if (c->shard == b->shard && strcmp(c->resource, b->resource) == 0) {
            char *pos = ferry_strdup(b->position);
            if (pos == NULL) return oom(err);
            ferry_free(c->position);
            c->position = pos;
            c->rows += b->rows;
            c->bytes += b->bytes;
            c->batches += b->batches;
            return FERRY_OK;
        }
    }
    if (s->n_held == s->cap_held) {
        int cap = s->cap_held ? 2 * s->cap_held : 8;
        void *m = ferry_realloc(s->held, (size_t)cap * sizeof *s->held);
        if (m == NULL) return oom(err);
        s->held = m;
        s->cap_held = cap;
    }
    struct held_checkpoint *c = &s->held[s->n_held];
    *c = *b;
    c->resource = ferry_strdup(b->resource);
    c->position = ferry_strdup(b->position);
    if (c->resource == NULL || c->position == NULL) {
        ferry_free(c->resource);
        ferry_free(c->position);
        return oom(err);
    }
    s->n_held++;
    return FERRY_OK;
}

/* The held checkpoints, in the group's transaction, before its COMMIT. */
static int flush_held(struct sink *s, struct ferry_error *err)
{
    int rc = s->n_held > 0 ? put_checkpoints(s, s->held, s->n_held, err) : FERRY_OK;
    drop_held(s);
    return rc;
}

static int sink_apply(void *ctx, const struct ferry_target *target, struct ferry_batch *b,
                      struct ferry_receipt *receipt, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || target->index < 0 || target->index >= s->n_t || !s->t[target->index].used)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": apply outside a session or to an unprepared target");
    struct target *t = &s->t[target->index];
    receipt->write_crc = ferry_batch_digest(b);
    receipt->rows = b->length;
    receipt->bytes = (int64_t)b->bytes;
    receipt->has_encoded_crc = false;
    receipt->encoded_crc = 0;
    snprintf(receipt->uri, sizeof receipt->uri, "%s", t->uri);
    if (receipt->write_crc != b->digest) return FERRY_OK; /* the pipeline reports divergence */
    s->crc = 0;
    int rc = FERRY_OK;
    if (!s->in_tx) rc = exec(s, "START TRANSACTION", WHAT ": begin", err);
    if (rc == FERRY_OK && b->length > 0) rc = write_rows(s, t, b, err);
    if (rc == FERRY_OK && b->position != NULL) {
        struct held_checkpoint c = {b->resource ? b->resource : "", b->position, b->shard,
                                    b->length, (int64_t)b->bytes, 1};
        rc = s->group ? hold_checkpoint(s, &c, err) : put_checkpoints(s, &c, 1, err);
    }
    if (!s->in_tx) {
        if (rc == FERRY_OK) rc = exec(s, "COMMIT", WHAT ": committing a batch", err);
        if (rc != FERRY_OK) mysql_query(s->c, "ROLLBACK");
    }
    if (rc != FERRY_OK) return rc;
    receipt->encoded_crc = s->crc;
    receipt->has_encoded_crc = true;
    return FERRY_OK;
}

/* ---- commit / abort ------------------------------------------------------------------- */

/* One atomic RENAME TABLE: readers see the old table or the new one. */
static int swap_staging(struct sink *s, struct target *t, struct ferry_error *err)
{
    bool exists = false;
    int rc = table_exists(s, t->table, &exists, err);
    if (rc != FERRY_OK) return rc;
    char *old_name = ferry_asprintf("%s__ferry_old", t->table);
    char *qold = old_name ? qualify(s, old_name, err) : NULL;
    ferry_free(old_name);
    if (qold == NULL) return oom(err);
    rc = drop_table(s, qold, err);
    char *sql = NULL;
    if (rc == FERRY_OK)
        sql = exists ? ferry_asprintf("RENAME TABLE %s TO %s, %s TO %s", t->qtable, qold,
                                      t->qstaging, t->qtable)
                     : ferry_asprintf("RENAME TABLE %s TO %s", t->qstaging, t->qtable);
    if (rc == FERRY_OK && sql == NULL) rc = oom(err);
    char what[300];
    snprintf(what, sizeof what, WHAT ": replacing table %s", t->qtable);
    if (rc == FERRY_OK) rc = exec_ddl(s, sql, what, err);
    if (rc == FERRY_OK && exists) rc = drop_table(s, qold, err);
    ferry_free(sql);
    ferry_free(qold);
    return rc;
}

static int sink_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": commit without a session");
    int rc = FERRY_OK;
    if (s->in_tx) {
        rc = flush_held(s, err); /* a group left open: its checkpoints go with its rows */
        if (rc == FERRY_OK) rc = exec(s, "COMMIT", WHAT ": commit", err);
        if (rc != FERRY_OK) return rc; /* abort() rolls back */
        s->in_tx = s->group = false;
    }
    for (int i = 0; i < s->n_t && rc == FERRY_OK; i++)
        if (s->t[i].used && s->t[i].mode == FERRY_WRITE_REPLACE)
            rc = swap_staging(s, &s->t[i], err);
    if (rc != FERRY_OK) return rc;
    s->session = false;
    return FERRY_OK;
}

static void sink_abort(void *ctx)
{
    struct sink *s = ctx;
    if (s == NULL || s->c == NULL) return;
    drop_held(s);
    if (s->in_tx) {
        mysql_query(s->c, "ROLLBACK");
        s->in_tx = s->group = false;
    }
    if (!s->session) return;
    s->session = false;
    for (int i = 0; i < s->n_t; i++) {
        struct target *t = &s->t[i];
        if (!t->used || t->mode != FERRY_WRITE_REPLACE) continue;
        if (drop_table(s, t->qstaging, NULL) != FERRY_OK) continue;
        ferry_buf_reset(&s->sql);
        if (ferry_buf_printf(&s->sql, "DELETE FROM `" CKPT "` WHERE pipeline = ") != FERRY_OK ||
            ferry__my_quote_text(s->c, &s->sql, s->pipeline, strlen(s->pipeline)) != FERRY_OK ||
            ferry_buf_printf(&s->sql, " AND resource = ") != FERRY_OK ||
            ferry__my_quote_text(s->c, &s->sql, t->resource, strlen(t->resource)) != FERRY_OK)
            continue;
        mysql_real_query(s->c, s->sql.data, s->sql.len);
    }
}

/* ---- commit groups (pipeline/commit_group.h) ------------------------------------------ */

/* A transaction the following applies join (per_apply sessions only): the cdc streams of one
 * source log, or a full read without resume points (a table without a key) committed whole
 * at its end. Nothing in apply runs DDL (exec_ddl), so nothing commits it implicitly. */
static int sink_group_begin(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->session || s->at_commit || s->in_tx)
        return ferry_error_set(err, FERRY_EINVAL, "mysql",
                               WHAT ": a commit group needs a per_apply session, no transaction "
                                    "open");
    int rc = exec(s, "START TRANSACTION", WHAT ": begin (commit group)", err);
    if (rc == FERRY_OK) s->in_tx = s->group = true;
    return rc;
}

/* The group's rows and every checkpoint its applies carried, in one commit. A failed COMMIT
 * (the connection lost, a deadlock) is rolled back: whether it committed is then decided by
 * the server alone, and the checkpoints went with the rows in either case. */
static int sink_group_commit(void *ctx, struct ferry_error *err)
{
    struct sink *s = ctx;
    if (!s->group)
        return ferry_error_set(err, FERRY_EINVAL, "mysql", WHAT ": no commit group open");
    int rc = flush_held(s, err);
    if (rc == FERRY_OK) rc = exec(s, "COMMIT", WHAT ": commit (commit group)", err);
    if (rc != FERRY_OK) mysql_query(s->c, "ROLLBACK");
    s->in_tx = s->group = false;
    return rc;
}

static void sink_group_abort(void *ctx)
{
    struct sink *s = ctx;
    drop_held(s);
    if (s->group && s->c != NULL) mysql_query(s->c, "ROLLBACK");
    if (s->group) s->in_tx = s->group = false;
}

/* ---- checkpoints ---------------------------------------------------------------------- */

static int sink_checkpoints(void *ctx, const char *pipeline, struct ferry_sink_checkpoint **out,
                            int *n, struct ferry_error *err)
{
    struct sink *s = ctx;
    *out = NULL;
    *n = 0;
    int rc = connect_db(s, err);
    bool exists = false;
    if (rc == FERRY_OK) rc = table_exists(s, CKPT, &exists, err);
    if (rc != FERRY_OK || !exists) return rc;
    bool counts = false;
    rc = checkpoint_counts(s, &counts, err);
    if (rc != FERRY_OK) return rc;
    ferry_buf_reset(&s->sql);
    rc = ferry_buf_printf(&s->sql, "SELECT resource, shard, run_id, position, %s FROM `" CKPT
                                   "` WHERE pipeline = ",
                          counts ? "run_rows, run_bytes, run_batches" : "NULL, NULL, NULL");
    if (rc == FERRY_OK)
        rc = ferry__my_quote_text(s->c, &s->sql, pipeline ? pipeline : "",
                                  strlen(pipeline ? pipeline : ""));
    if (rc == FERRY_OK) rc = ferry_buf_printf(&s->sql, " ORDER BY resource, shard");
    if (rc != FERRY_OK) return oom(err);
    MYSQL_RES *r = NULL;
    if (mysql_real_query(s->c, s->sql.data, s->sql.len) != 0 ||
        (r = mysql_store_result(s->c)) == NULL)
        return ferry__my_error(err, FERRY_ESINK, s->c, WHAT ": %s: reading checkpoints",
                               s->conn.peer);
    int rows = (int)mysql_num_rows(r);
    struct ferry_sink_checkpoint *v = ferry_calloc((size_t)(rows ? rows : 1), sizeof *v);
    if (v == NULL) {
        mysql_free_result(r);
        return oom(err);
    }
    for (int i = 0; i < rows; i++) {
        MYSQL_ROW row = mysql_fetch_row(r);
        v[i].resource = ferry_strdup(row[0]);
        v[i].shard = (int)strtol(row[1], NULL, 10);
        v[i].run_id = strtoll(row[2], NULL, 10);
        v[i].position = row[3] ? ferry_strdup(row[3]) : NULL;
        v[i].has_counts = row[4] && row[5] && row[6];
        if (v[i].has_counts) {
            v[i].rows = strtoll(row[4], NULL, 10);
            v[i].bytes = strtoll(row[5], NULL, 10);
            v[i].batches = strtoll(row[6], NULL, 10);
        }
        if (v[i].resource == NULL || (row[3] && v[i].position == NULL)) {
            mysql_free_result(r);
            ferry_sink_checkpoints_free(v, i + 1);
            return oom(err);
        }
    }
    mysql_free_result(r);
    *out = v;
    *n = rows;
    return FERRY_OK;
}

const struct ferry_sink_vtable ferry__mysql_sink = {
    .abi = FERRY_CONNECTOR_ABI,
    .name = "mysql",
    .tuning_keys = sink_tuning_keys,
    .open = sink_open,
    .capabilities = sink_capabilities,
    .prepare = sink_prepare,
    .begin = sink_begin,
    .apply = sink_apply,
    .commit = sink_commit,
    .abort = sink_abort,
    .close = sink_close,
    .checkpoints = sink_checkpoints,
    .verify_open = ferry__my_verify_open,
    .group_begin = sink_group_begin,
    .group_commit = sink_group_commit,
    .group_abort = sink_group_abort,
};
