/* connectors/mysql/my_common.c - connecting to MySQL/MariaDB and the helpers the source and
 * the sink share (my_common.h). Calls Connector/C (libmariadb) and the config accessors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "connectors/mysql/my_common.h"

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into a fresh string, NULL on a bad escape or no memory. */
static char *pct_decode(const char *s, size_t n)
{
    char *out = ferry_malloc(n + 1);
    if (out == NULL) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int a = i + 2 < n ? hexval(s[i + 1]) : -1;
            int b = a >= 0 ? hexval(s[i + 2]) : -1;
            if (a < 0 || b < 0 || (a == 0 && b == 0)) {
                out[o] = '\0'; /* ferry_secret_free wipes up to the terminator */
                ferry_secret_free(out);
                return NULL;
            }
            out[o++] = (char)(a * 16 + b);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

void ferry__my_conn_free(struct ferry_my_conn *c)
{
    if (c == NULL) return;
    ferry_free(c->host);
    ferry_free(c->user);
    ferry_secret_free(c->password);
    ferry_free(c->db);
    ferry_free(c->socket);
    ferry_free(c->tls_ca);
    ferry_free(c->tls_cert);
    ferry_free(c->tls_key);
    c->host = c->user = c->password = c->db = c->socket = NULL;
    c->tls_ca = c->tls_cert = c->tls_key = NULL;
}

static int bad_url(struct ferry_error *err, const char *why)
{
    return ferry_error_set(err, FERRY_ECONFIG, "config",
                           "not a valid MySQL URL (%s; expected "
                           "mysql://user:password@host:port/database; value not shown)",
                           why);
}

int ferry__my_parse_url(const char *url, struct ferry_my_conn *c, struct ferry_error *err)
{
    const char *p;
    if (strncmp(url, "mysql://", 8) == 0)
        p = url + 8;
    else if (strncmp(url, "mariadb://", 10) == 0)
        p = url + 10;
    else
        return bad_url(err, "the scheme must be mysql:// or mariadb://");
    const char *end = p + strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '@') at = q; /* the last one: a password may hold an encoded '@' only */
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);
        c->user = pct_decode(p, ulen);
        if (colon) c->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
        if (c->user == NULL || (colon && c->password == NULL))
            return bad_url(err, "bad percent-encoding in the user or password");
        p = at + 1;
    }
    const char *hp = p;
    const char *colon = NULL;
    if (*hp == '[') { /* [IPv6]:port */
        const char *rb = memchr(hp, ']', (size_t)(end - hp));
        if (rb == NULL) return bad_url(err, "unclosed [ in the host");
        c->host = ferry_strndup(hp + 1, (size_t)(rb - hp - 1));
        if (rb + 1 < end && rb[1] == ':') colon = rb + 1;
    } else {
        colon = memchr(hp, ':', (size_t)(end - hp));
        c->host = ferry_strndup(hp, colon ? (size_t)(colon - hp) : (size_t)(end - hp));
    }
    if (c->host == NULL) return FERRY_ENOMEM;
    c->port = 3306;
    if (colon != NULL) {
        char *e = NULL;
        long port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) return bad_url(err, "bad port");
        c->port = (unsigned)port;
    }
    p = end;
    if (*p == '/') {
        p++;
        size_t n = strcspn(p, "?#");
        if (n > 0) {
            c->db = pct_decode(p, n);
            if (c->db == NULL) return bad_url(err, "bad percent-encoding in the database");
        }
        p += n;
    }
    if (*p == '?') {
        p++;
        while (*p && *p != '#') {
            size_t n = strcspn(p, "&#");
            if (n > 7 && strncmp(p, "socket=", 7) == 0) {
                ferry_free(c->socket);
                c->socket = pct_decode(p + 7, n - 7);
                if (c->socket == NULL) return bad_url(err, "bad percent-encoding in socket");
            } else {
                return bad_url(err, "unknown query parameter (only socket= is read)");
            }
            p += n;
            if (*p == '&') p++;
        }
    }
    if (c->db == NULL) return bad_url(err, "no database after the host");
    snprintf(c->peer, sizeof c->peer, "%.100s:%u/%.64s", c->host[0] ? c->host : "localhost",
             c->port, c->db);
    return FERRY_OK;
}

int ferry__my_read_conn_config(struct ferry_cfg *cfg, const char *what, struct ferry_my_conn *c,
                               struct ferry_error *err)
{
    memset(c, 0, sizeof *c);
    c->connect_timeout_ms = 10000;
    c->io_timeout_ms = 600000;
    int rc = ferry_cfg_duration_ms(cfg, "connect_timeout", false, &c->connect_timeout_ms, err);
    if (rc == FERRY_OK)
        rc = ferry_cfg_duration_ms(cfg, "io_timeout", false, &c->io_timeout_ms, err);
    if (rc != FERRY_OK) return rc;
    if (c->connect_timeout_ms < 1000 || c->io_timeout_ms < 1000)
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "%s: connect_timeout and io_timeout must be at least 1s", what);
    const char *sock = NULL, *ca = NULL, *cert = NULL, *key = NULL;
    static const char *const tls_words[] = {"disabled", "required", "verify_full", NULL};
    int tls = FERRY_MY_TLS_DISABLED;
    rc = ferry_cfg_str(cfg, "socket", false, &sock, err);
    if (rc == FERRY_OK) rc = ferry_cfg_enum(cfg, "tls", false, tls_words, &tls, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "tls_ca", false, &ca, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "tls_cert", false, &cert, err);
    if (rc == FERRY_OK) rc = ferry_cfg_str(cfg, "tls_key", false, &key, err);
    if (rc != FERRY_OK) return rc;
    if (tls == FERRY_MY_TLS_VERIFY_FULL && ca == NULL)
        return ferry_cfg_error(err, ferry_cfg_get(cfg, "tls"),
                               "%s: tls: verify_full needs tls_ca (the CA file that signed the "
                               "server's certificate)",
                               what);
    if ((cert == NULL) != (key == NULL))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, cert ? "tls_cert" : "tls_key"),
                               "%s: tls_cert and tls_key go together", what);
    if (tls == FERRY_MY_TLS_DISABLED && (ca || cert))
        return ferry_cfg_error(err, ferry_cfg_get(cfg, ca ? "tls_ca" : "tls_cert"),
                               "%s: TLS files given with tls: disabled (set tls: required or "
                               "verify_full)",
                               what);
    struct ferry_cfg *node = ferry_cfg_get(cfg, "url");
    bool plain = node != NULL && node->kind == FERRY_CFG_SCALAR && node->scalar != NULL &&
                 strncmp(node->scalar, "env:", 4) != 0 && strncmp(node->scalar, "file:", 5) != 0;
    char *url = NULL;
    rc = ferry_cfg_secret(cfg, "url", true, true, &url, err);
    if (rc != FERRY_OK) return rc;
    rc = ferry__my_parse_url(url, c, err);
    ferry_secret_free(url);
    if (rc == FERRY_ENOMEM)
        rc = ferry_error_set(err, FERRY_ENOMEM, "mysql", "%s: out of memory", what);
    if (rc != FERRY_OK) {
        ferry__my_conn_free(c);
        return ferry_cfg_error(err, node, "%s: %s", what, err->message);
    }
    if (plain && c->password != NULL) {
        ferry__my_conn_free(c);
        return ferry_cfg_error(err, node,
                               "%s: a plain url must not hold a password (it would be saved with "
                               "the run); use env:NAME or file:PATH",
                               what);
    }
    if (sock != NULL) {
        ferry_free(c->socket);
        c->socket = ferry_strdup(sock);
        if (c->socket == NULL) {
            ferry__my_conn_free(c);
            return ferry_error_set(err, FERRY_ENOMEM, "mysql", "%s: out of memory", what);
        }
    }
    c->tls = tls;
    if ((ca && (c->tls_ca = ferry_strdup(ca)) == NULL) ||
        (cert && (c->tls_cert = ferry_strdup(cert)) == NULL) ||
        (key && (c->tls_key = ferry_strdup(key)) == NULL)) {
        ferry__my_conn_free(c);
        return ferry_error_set(err, FERRY_ENOMEM, "mysql", "%s: out of memory", what);
    }
    if (c->socket != NULL) snprintf(c->peer, sizeof c->peer, "%.160s/%.64s", c->socket, c->db);
    return FERRY_OK;
}

int ferry__my_error(struct ferry_error *err, int code, MYSQL *m, const char *fmt, ...)
{
    char head[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (m == NULL) return ferry_error_set(err, code, "mysql", "%s", head);
    return ferry_error_set(err, code, "mysql", "%s: %s (error %u, SQLSTATE %s)", head,
                           mysql_error(m), mysql_errno(m), mysql_sqlstate(m));
}

int ferry__my_exec(MYSQL *m, const char *sql, int code, const char *what, struct ferry_error *err)
{
    if (mysql_real_query(m, sql, strlen(sql)) != 0)
        return ferry__my_error(err, code, m, "%s", what);
    MYSQL_RES *r = mysql_store_result(m);
    if (r != NULL)
        mysql_free_result(r);
    else if (mysql_field_count(m) != 0)
        return ferry__my_error(err, code, m, "%s", what);
    return FERRY_OK;
}

int ferry__my_connect(const struct ferry_my_conn *c, const char *what, MYSQL **out,
                      struct ferry_error *err)
{
    *out = NULL;
    MYSQL *m = mysql_init(NULL);
    if (m == NULL) return ferry_error_set(err, FERRY_ENOMEM, "mysql", "%s: out of memory", what);
    unsigned ct = (unsigned)((c->connect_timeout_ms + 999) / 1000);
    unsigned io = (unsigned)((c->io_timeout_ms + 999) / 1000);
    mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &io);
    mysql_optionsv(m, MYSQL_OPT_WRITE_TIMEOUT, &io);
    mysql_optionsv(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    unsigned int local = c->local_infile ? 1 : 0;
    mysql_optionsv(m, MYSQL_OPT_LOCAL_INFILE, &local);
    /* Never read option files: what the pipeline says is what connects. */
    mysql_optionsv(m, MYSQL_READ_DEFAULT_FILE, "/dev/null");
    if (c->tls != FERRY_MY_TLS_DISABLED) {
        my_bool on = 1, verify = c->tls == FERRY_MY_TLS_VERIFY_FULL;
        mysql_optionsv(m, MYSQL_OPT_SSL_ENFORCE, &on);
        mysql_optionsv(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
        if (c->tls_ca) mysql_optionsv(m, MYSQL_OPT_SSL_CA, c->tls_ca);
        if (c->tls_cert) mysql_optionsv(m, MYSQL_OPT_SSL_CERT, c->tls_cert);
        if (c->tls_key) mysql_optionsv(m, MYSQL_OPT_SSL_KEY, c->tls_key);
    }
    unsigned proto = c->socket ? MYSQL_PROTOCOL_SOCKET : MYSQL_PROTOCOL_TCP;
    mysql_optionsv(m, MYSQL_OPT_PROTOCOL, &proto);
    if (mysql_real_connect(m, c->socket ? NULL : c->host, c->user, c->password, c->db, c->port,
                           c->socket, CLIENT_FOUND_ROWS) == NULL) {
        int rc = ferry__my_error(
            err, mysql_errno(m) == 1049 || mysql_errno(m) == 1044 ? FERRY_ENOTFOUND : FERRY_EIO, m,
            "%s: connecting to %s", what, c->peer);
        mysql_close(m);
        return rc;
    }
    char sql[256];
    snprintf(sql, sizeof sql,
             "SET SESSION time_zone = '+00:00', SESSION net_write_timeout = %u, "
             "SESSION net_read_timeout = %u, SESSION sql_mode = CONCAT(@@sql_mode, "
             "',NO_BACKSLASH_ESCAPES')",
             io, io);
    int rc = ferry__my_exec(m, sql, FERRY_EIO, what, err);
    if (rc != FERRY_OK) {
        ferry_error_prefix(err, "%s", c->peer);
        mysql_close(m);
        return rc;
    }
    *out = m;
    return FERRY_OK;
}

int ferry__my_quote_ident(struct ferry_buf *b, const char *name, struct ferry_error *err)
{
    size_t n = strlen(name), chars = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)name[i] & 0xC0) != 0x80) chars++;
    if (n == 0 || chars > 64)
        return ferry_error_set(err, FERRY_ECONFIG, "config", "MySQL identifier \"%.80s\" is %s",
                               name, n == 0 ? "empty" : "longer than 64 characters");
    if (ferry_buf_reserve(b, 2 * n + 2) != FERRY_OK)
        return ferry_error_set(err, FERRY_ENOMEM, "mysql", "out of memory");
    b->data[b->len++] = '`';
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '`') b->data[b->len++] = '`';
        b->data[b->len++] = name[i];
    }
    b->data[b->len++] = '`';
    b->data[b->len] = '\0';
    return FERRY_OK;
}

int ferry__my_quote_text(MYSQL *m, struct ferry_buf *b, const char *s, size_t n)
{
    if (ferry_buf_reserve(b, 2 * n + 3) != FERRY_OK) return FERRY_ENOMEM;
    b->data[b->len++] = '\'';
    b->len += mysql_real_escape_string(m, b->data + b->len, s, (unsigned long)n);
    b->data[b->len++] = '\'';
    b->data[b->len] = '\0';
    return FERRY_OK;
}

/* One part of a dotted name: `quoted` or "quoted" (the quote doubled inside) or plain up to
 * the dot. */
static char *take_part(const char **p)
{
    const char *s = *p;
    char q = *s;
    if (q != '`' && q != '"') {
        size_t n = strcspn(s, ".");
        *p = s + n;
        return ferry_strndup(s, n);
    }
    s++;
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    for (;;) {
        if (*s == '\0') {
            ferry_buf_release(&b);
            return NULL;
        }
        if (*s == q) {
            if (s[1] != q) break;
            s++;
        }
        if (ferry_buf_append(&b, s, 1) != FERRY_OK) {
            ferry_buf_release(&b);
            return NULL;
        }
        s++;
    }
    *p = s + 1;
    char *out = b.len ? ferry_buf_take(&b) : ferry_strdup("");
    ferry_buf_release(&b);
    return out;
}

int ferry__my_split_name(const char *qualified, char **db, char **table, struct ferry_error *err)
{
    *db = *table = NULL;
    const char *p = qualified;
    char *a = take_part(&p);
    char *b = NULL;
    if (a != NULL && *p == '.') {
        p++;
        b = take_part(&p);
    }
    if (a == NULL || *p != '\0' || a[0] == '\0' || (b != NULL && b[0] == '\0')) {
        ferry_free(a);
        ferry_free(b);
        return ferry_error_set(err, FERRY_ECONFIG, "config",
                               "table \"%.200s\": not a table name (table, db.table, or "
                               "`quoted`.`parts`)",
                               qualified);
    }
    if (b != NULL) {
        *db = a;
        *table = b;
    } else {
        *table = a;
    }
    return FERRY_OK;
}

const char *ferry__my_log_status_sql(const char *failed, unsigned errnum)
{
    if (failed == NULL) return "SHOW MASTER STATUS";
    if (strcmp(failed, "SHOW MASTER STATUS") == 0 && errnum == 1064) /* ER_PARSE_ERROR */
        return "SHOW BINARY LOG STATUS";
    return NULL;
}
