/* config/access.c - the policy for pipelines that arrive over the API (config/access.h).
 *
 * The check walks every scalar of the pipeline tree once: env:/file: references, local
 * paths (keys path, warehouse, dir, root, file), URLs (scheme://host:port, file://PATH),
 * libpq conninfo strings (host=, hostaddr=, port=) and host keys (endpoint, host, servers).
 * Paths are made canonical (realpath of the longest existing prefix; a ".." in the part
 * that does not exist yet is refused) before they are compared with the allowed folders
 * and the protected files. Hosts are resolved with getaddrinfo and every address must pass:
 * that is why the worker checks again, right before it connects.
 *
 * Calls config (the policy file), libc's resolver. Called by server/api.c, cli/cmd_serve.c,
 * the runner (worker side, ferry_access_check_from_env). */
#include "config/access.h"
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ferry/config.h"
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "net/pins.h"

struct host_rule {
    char *name;     /* "db.example.com", "*.example.com", "*"; NULL for a CIDR */
    int family;     /* AF_INET / AF_INET6 for a CIDR */
    unsigned char addr[16];
    int bits;
    int port;       /* 0: any */
};

struct strv {
    char **v;
    int n;
};

struct ferry_access {
    bool allow_all;
    bool pin; /* the worker's check: record approved addresses (net/pins.h) */
    struct strv paths, env, files, connectors, protect, secrets;
    bool connectors_set, hosts_set, secrets_set;
    struct host_rule *hosts;
    int n_hosts;
};

static int oom(struct ferry_error *err)
{
    return ferry_error_set(err, FERRY_ENOMEM, "policy", "out of memory");
}

static int strv_add(struct strv *s, const char *v)
{
    char **g = ferry_realloc(s->v, (size_t)(s->n + 1) * sizeof *g);
    if (g == NULL) return FERRY_ENOMEM;
    s->v = g;
    if ((s->v[s->n] = ferry_strdup(v)) == NULL) return FERRY_ENOMEM;
    s->n++;
    return FERRY_OK;
}

static void strv_free(struct strv *s)
{
    for (int i = 0; i < s->n; i++)
        ferry_free(s->v[i]);
    ferry_free(s->v);
}

void ferry_access_free(struct ferry_access *a)
{
    if (a == NULL) return;
    strv_free(&a->paths);
    strv_free(&a->env);
    strv_free(&a->secrets);
    strv_free(&a->files);
    strv_free(&a->connectors);
    strv_free(&a->protect);
    for (int i = 0; i < a->n_hosts; i++)
        ferry_free(a->hosts[i].name);
    ferry_free(a->hosts);
    ferry_free(a);
}

bool ferry_access_allow_all(const struct ferry_access *a)
{
    return a && a->allow_all;
}

/* ---- paths ---- */

/* The canonical form of path into out (PATH_MAX): realpath of the longest existing prefix
 * plus the rest, which may not hold "." or ".." components. false when it cannot be made. */
static bool canon(const char *path, char *out)
{
    char buf[PATH_MAX];
    if (path[0] == '/') {
        if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return false;
    } else {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL) return false;
        if (snprintf(buf, sizeof buf, "%s/%s", cwd, path) >= (int)sizeof buf) return false;
    }
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    /* Walk back to the longest prefix that exists. */
    char head[PATH_MAX];
    size_t cut = n;
    for (;;) {
        memcpy(head, buf, cut);
        head[cut] = '\0';
        if (realpath(cut ? head : "/", out) != NULL) break;
        if (errno != ENOENT && errno != ENOTDIR) return false;
        while (cut > 0 && buf[cut - 1] != '/')
            cut--;
        if (cut > 0) cut--; /* drop the slash */
        if (cut == 0) {
            snprintf(out, PATH_MAX, "/");
            break;
        }
    }
    const char *tail = buf + cut;
    /* The tail names things that do not exist yet: no way back up out of a folder. */
    for (const char *t = tail; *t;) {
        while (*t == '/')
            t++;
        const char *e = strchr(t, '/');
        size_t l = e ? (size_t)(e - t) : strlen(t);
        if ((l == 1 && t[0] == '.') || (l == 2 && t[0] == '.' && t[1] == '.')) return false;
        t += l;
    }
    size_t ol = strlen(out);
    if (ol == 1 && *tail == '/') ol = 0; /* "/" + "/x" */
    if (ol + strlen(tail) >= PATH_MAX) return false;
    memcpy(out + ol, tail, strlen(tail) + 1);
    return true;
}

static bool under(const char *p, const char *dir)
{
    size_t l = strlen(dir);
    if (l == 1 && dir[0] == '/') return true;
    return strncmp(p, dir, l) == 0 && (p[l] == '\0' || p[l] == '/');
}

int ferry_access_protect(struct ferry_access *a, const char *path, struct ferry_error *err)
{
    char c[PATH_MAX];
    if (path == NULL || path[0] == '\0' || strstr(path, "://")) return FERRY_OK;
    if (!canon(path, c)) return FERRY_OK;
    if (strv_add(&a->protect, c) != FERRY_OK) return oom(err);
    /* SQLite's companions of a state file. */
    static const char *const sfx[] = {"-wal", "-shm", "-journal", NULL};
    for (int i = 0; sfx[i]; i++) {
        char s[PATH_MAX + 16];
        snprintf(s, sizeof s, "%s%s", c, sfx[i]);
        if (strv_add(&a->protect, s) != FERRY_OK) return oom(err);
    }
    return FERRY_OK;
}

char *ferry_access_protected_list(const struct ferry_access *a)
{
    struct ferry_buf b;
    ferry_buf_init(&b, 0);
    for (int i = 0; i < a->protect.n; i++)
        ferry_buf_printf(&b, "%s%s", i ? "\n" : "", a->protect.v[i]);
    char *s = ferry_strndup(b.data ? b.data : "", b.len);
    ferry_buf_release(&b);
    return s;
}

static int refuse(struct ferry_error *err, const char *what, const char *rule, const char *fmt,
                  const char *arg)
{
    char why[600];
    snprintf(why, sizeof why, fmt, arg);
    return ferry_error_set(err, FERRY_EPOLICY, "policy", "%s: refused by policy rule %s: %s",
                           what, rule, why);
}

/* A local path used by a pipeline (rule: the folder list, or a file: list for references). */
static int check_path(const struct ferry_access *a, const char *what, const char *path,
                      const struct strv *allowed, const char *rule, struct ferry_error *err)
{
    char c[PATH_MAX];
    if (!canon(path, c))
        return refuse(err, what, rule, "%s cannot be resolved to a path without \"..\"", path);
    for (int i = 0; i < a->protect.n; i++)
        if (under(c, a->protect.v[i]) || under(a->protect.v[i], c))
            return refuse(err, what, "protected",
                          "%s is or holds a file of the server itself (state store, logs, policy, "
                          "keys)",
                          path);
    /* A FIFO blocks whoever opens it, a device never ends: regular files and folders only. */
    struct stat sb;
    if (stat(c, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
        return refuse(err, what, "regular-files",
                      "%s is not a regular file or folder (a FIFO, socket or device)", path);
    if (a->allow_all) return FERRY_OK;
    for (int i = 0; i < allowed->n; i++)
        if (under(c, allowed->v[i])) return FERRY_OK;
    return refuse(err, what, rule, "%s is not under an allowed folder", path);
}

/* ---- env, secret ---- */

/* NAME or PREFIX* entries; an empty list matches nothing. */
static bool name_listed(const struct strv *l, const char *name)
{
    for (int i = 0; i < l->n; i++) {
        const char *e = l->v[i];
        size_t n = strlen(e);
        if (n > 0 && e[n - 1] == '*' ? strncmp(name, e, n - 1) == 0 : strcmp(name, e) == 0)
            return true;
    }
    return false;
}

bool ferry_access_secret_allowed(const struct ferry_access *a, const char *name)
{
    if (a->allow_all || !a->secrets_set) return true;
    return name_listed(&a->secrets, name);
}

bool ferry_access_env_allowed(const struct ferry_access *a, const char *name)
{
    /* the server's token and the secrets store's key: never, whatever the policy */
    if (!strcmp(name, "FERRY_API_TOKEN") || !strcmp(name, "FERRY_STORE_KEY")) return false;
    if (a->allow_all) return true;
    if (a->env.n == 0)
        return !strncmp(name, FERRY_ACCESS_ENV_PREFIX, strlen(FERRY_ACCESS_ENV_PREFIX));
    for (int i = 0; i < a->env.n; i++) {
        const char *e = a->env.v[i];
        size_t l = strlen(e);
        if (l > 0 && e[l - 1] == '*' ? strncmp(name, e, l - 1) == 0 : strcmp(name, e) == 0)
            return true;
    }
    return false;
}

/* ---- hosts ---- */

static bool parse_cidr(const char *s, struct host_rule *r)
{
    char buf[128];
    const char *slash = strchr(s, '/');
    size_t l = slash ? (size_t)(slash - s) : strlen(s);
    if (l >= sizeof buf) return false;
    memcpy(buf, s, l);
    buf[l] = '\0';
    if (buf[0] == '[' && l > 1 && buf[l - 1] == ']') {
        memmove(buf, buf + 1, l - 2);
        buf[l - 2] = '\0';
    }
    if (inet_pton(AF_INET, buf, r->addr) == 1)
        r->family = AF_INET, r->bits = 32;
    else if (inet_pton(AF_INET6, buf, r->addr) == 1)
        r->family = AF_INET6, r->bits = 128;
    else
        return false;
    if (slash) {
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (*end != '\0' || end == slash + 1 || b < 0 || b > r->bits) return false;
        r->bits = (int)b;
    }
    return true;
}

/* "name", "name:port", "*.suffix", "10.0.0.0/8", "10.0.0.0/8:5432", "[fd00::]/8:5432". */
static bool parse_host_rule(const char *s, struct host_rule *r)
{
    memset(r, 0, sizeof *r);
    char buf[300];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf || buf[0] == '\0') return false;
    char *colon = strrchr(buf, ':');
    char *rb = strrchr(buf, ']');
    /* a port only after the last ']' (IPv6) or when the text holds one colon */
    if (colon && (rb ? colon > rb : strchr(buf, ':') == colon)) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end != '\0' || p < 1 || p > 65535) return false;
        r->port = (int)p;
        *colon = '\0';
    }
    if (parse_cidr(buf, r)) return true;
    for (const char *c = buf; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-' && *c != '*' && *c != '_')
            return false;
    r->name = ferry_strdup(buf);
    return r->name != NULL;
}

static bool in_cidr(const struct host_rule *r, int family, const unsigned char *addr)
{
    if (r->name || r->family != family) return false;
    int full = r->bits / 8, rest = r->bits % 8;
    if (memcmp(r->addr, addr, (size_t)full) != 0) return false;
    if (rest == 0) return true;
    unsigned char m = (unsigned char)(0xff << (8 - rest));
    return (r->addr[full] & m) == (addr[full] & m);
}

static bool name_matches(const char *rule, const char *host)
{
    if (!strcmp(rule, "*")) return true;
    if (rule[0] == '*' && rule[1] == '.') {
        size_t hl = strlen(host), sl = strlen(rule + 1);
        return hl > sl && strcasecmp(host + hl - sl, rule + 1) == 0;
    }
    return strcasecmp(rule, host) == 0;
}

/* Addresses no default lets a pipeline reach: the host itself, link-local (cloud
 * metadata lives there), unspecified, multicast and other metadata services. */
static const char *denied_kind(int family, const unsigned char *a)
{
    if (family == AF_INET6) {
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const unsigned char zero[16] = {0};
        static const unsigned char ec2[16] = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0,
                                              0,    0, 0,    0,    0, 0, 0, 0x54};
        if (memcmp(a, v4mapped, 12) == 0) return denied_kind(AF_INET, a + 12);
        if (memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1))
            return a[15] ? "loopback" : "unspecified";
        if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return "link-local";
        if (a[0] == 0xff) return "multicast";
        if (memcmp(a, ec2, 16) == 0) return "cloud metadata";
        return NULL;
    }
    if (a[0] == 127) return "loopback";
    if (a[0] == 0) return "unspecified";
    if (a[0] == 169 && a[1] == 254) return "link-local (cloud metadata)";
    if (a[0] >= 224) return "multicast or reserved";
    if (a[0] == 100 && a[1] == 100 && a[2] == 100 && a[3] == 200) return "cloud metadata";
    return NULL;
}

static void pin_first(const char *host, int port, const struct addrinfo *res)
{
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        char txt[INET6_ADDRSTRLEN];
        const void *ad = ai->ai_family == AF_INET
                             ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                             : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
            inet_ntop(ai->ai_family, ad, txt, sizeof txt)) {
            ferry_pins_add(host, port, txt);
            return;
        }
    }
}

int ferry_access_check_host(const struct ferry_access *a, const char *what, const char *host,
                            int port, struct ferry_error *err)
{
    if (a->allow_all) return FERRY_OK;
    char h[300];
    size_t hl = strlen(host);
    if (hl == 0) snprintf(h, sizeof h, "localhost");
    else if (host[0] == '[' && hl > 2 && host[hl - 1] == ']')
        snprintf(h, sizeof h, "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(h, sizeof h, "%s", host);
    if (h[0] == '/') return refuse(err, what, "hosts", "%s: local sockets are not allowed", h);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(h, NULL, &hints, &res);
    if (g != 0 || res == NULL)
        return refuse(err, what, "hosts", "%s does not resolve; only resolvable hosts are checked "
                                          "and allowed", h);
    bool name_ok = !a->hosts_set;
    for (int i = 0; i < a->n_hosts && !name_ok; i++)
        if (a->hosts[i].name && name_matches(a->hosts[i].name, h) &&
            (a->hosts[i].port == 0 || a->hosts[i].port == port))
            name_ok = true;
    int rc = FERRY_OK;
    for (struct addrinfo *ai = res; ai && rc == FERRY_OK; ai = ai->ai_next) {
        int fam = ai->ai_family;
        const unsigned char *ad =
            fam == AF_INET ? (const unsigned char *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                           : (const unsigned char *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        if (fam != AF_INET && fam != AF_INET6) continue;
        bool cidr_ok = false;
        for (int i = 0; i < a->n_hosts && !cidr_ok; i++)
            if (in_cidr(&a->hosts[i], fam, ad) && (a->hosts[i].port == 0 || a->hosts[i].port == port))
                cidr_ok = true;
        char txt[INET6_ADDRSTRLEN];
        inet_ntop(fam, ad, txt, sizeof txt);
        const char *kind = denied_kind(fam, ad);
        char why[400];
        if (kind && !cidr_ok) {
            snprintf(why, sizeof why, "%s resolves to %s, a %s address (allowed only by an explicit "
                                      "CIDR entry)", h, txt, kind);
            rc = refuse(err, what, "hosts", "%s", why);
        } else if (!name_ok && !cidr_ok) {
            snprintf(why, sizeof why, "%s port %d (address %s) is not in the allowed hosts", h, port,
                     txt);
            rc = refuse(err, what, "hosts", "%s", why);
        }
    }
    /* The worker connects to the address checked here, not to what the name says later. */
    unsigned char probe[16];
    if (rc == FERRY_OK && a->pin && inet_pton(AF_INET, h, probe) != 1 &&
        inet_pton(AF_INET6, h, probe) != 1)
        pin_first(h, port, res);
    freeaddrinfo(res);
    return rc;
}

static int default_port(const char *scheme, size_t l)
{
    static const struct {
        const char *s;
        int port;
    } d[] = {{"postgres", 5432}, {"postgresql", 5432}, {"http", 80}, {"https", 443},
             {"nats", 4222},     {"mysql", 3306},      {"mariadb", 3306}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (strlen(d[i].s) == l && strncasecmp(scheme, d[i].s, l) == 0) return d[i].port;
    return 0;
}

/* "host[:port]" or "[v6]:port" into host and port (keeps port when none is written). */
static void split_host_port(const char *s, size_t n, char *host, size_t hl, int *port)
{
    const char *colon = NULL;
    if (n > 0 && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (rb && rb + 1 < s + n && rb[1] == ':') colon = rb + 1;
    } else {
        colon = memchr(s, ':', n);
        if (colon && memchr(colon + 1, ':', (size_t)(s + n - colon - 1))) colon = NULL; /* v6 */
    }
    size_t l = colon ? (size_t)(colon - s) : n;
    snprintf(host, hl, "%.*s", (int)l, s);
    if (colon) *port = (int)strtol(colon + 1, NULL, 10);
}

/* libpq conninfo "host=a,b port=5432 dbname=x": every host. */
static int check_conninfo(const struct ferry_access *a, const char *what, const char *v,
                          struct ferry_error *err)
{
    char hosts[512] = "", ports[64] = "";
    for (const char *p = v; *p;) {
        while (isspace((unsigned char)*p))
            p++;
        const char *eq = strchr(p, '=');
        if (eq == NULL) break;
        size_t kl = (size_t)(eq - p);
        while (kl > 0 && isspace((unsigned char)p[kl - 1]))
            kl--;
        const char *val = eq + 1;
        while (isspace((unsigned char)*val))
            val++;
        size_t vl = 0;
        bool q = *val == '\'';
        if (q) val++;
        while (val[vl] && (q ? val[vl] != '\'' : !isspace((unsigned char)val[vl])))
            vl++;
        if ((kl == 4 && !strncmp(p, "host", 4)) || (kl == 8 && !strncmp(p, "hostaddr", 8)))
            snprintf(hosts + strlen(hosts), sizeof hosts - strlen(hosts), "%s%.*s",
                     hosts[0] ? "," : "", (int)vl, val);
        if (kl == 4 && !strncmp(p, "port", 4)) snprintf(ports, sizeof ports, "%.*s", (int)vl, val);
        p = val + vl + (q && val[vl] ? 1 : 0);
    }
    int port = ports[0] ? (int)strtol(ports, NULL, 10) : 5432;
    if (hosts[0] == '\0') return ferry_access_check_host(a, what, "", port, err);
    char *save = NULL;
    for (char *h = strtok_r(hosts, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
        int rc = ferry_access_check_host(a, what, h, port, err);
        if (rc) return rc;
    }
    return FERRY_OK;
}

/* scheme://[user[:pw]@]host[:port][/path][?query] */
static int check_url(const struct ferry_access *a, const char *what, const char *v,
                     struct ferry_error *err)
{
    const char *sep = strstr(v, "://");
    size_t sl = (size_t)(sep - v);
    if ((sl == 4 && !strncasecmp(v, "file", 4)))
        return check_path(a, what, sep + 3, &a->paths, "paths", err);
    /* Object store URLs name a bucket, not a host: the endpoint key names the host. */
    if ((sl == 2 && !strncasecmp(v, "s3", 2)) || (sl == 2 && !strncasecmp(v, "gs", 2)) ||
        (sl == 3 && !strncasecmp(v, "s3a", 3)))
        return FERRY_OK;
    const char *auth = sep + 3;
    size_t al = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < al; i++)
        if (auth[i] == '@') at = auth + i;
    if (at) {
        al -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    int port = default_port(v, sl);
    char hostlist[512];
    snprintf(hostlist, sizeof hostlist, "%.*s", (int)al, auth);
    /* libpq's URLs may name a host (even a socket folder) in the query. */
    const char *qh = strstr(auth, "?host=");
    if (qh == NULL) qh = strstr(auth, "&host=");
    if (qh) {
        qh += 6;
        snprintf(hostlist, sizeof hostlist, "%.*s", (int)strcspn(qh, "&"), qh);
    }
    if (hostlist[0] == '\0') return ferry_access_check_host(a, what, "", port, err);
    char *save = NULL;
    for (char *h = strtok_r(hostlist, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
        char host[300];
        int p = port;
        split_host_port(h, strlen(h), host, sizeof host, &p);
        int rc = ferry_access_check_host(a, what, host, p, err);
        if (rc) return rc;
    }
    return FERRY_OK;
}

static bool key_is(const char *k, const char *const *words)
{
    for (int i = 0; k && words[i]; i++)
        if (!strcmp(k, words[i])) return true;
    return false;
}

static const char *const path_keys[] = {"path", "warehouse", "dir", "directory", "root",
                                        "file", "files", NULL};
static const char *const conn_keys[] = {"url", "conninfo", "dsn", "uri", "catalog_uri", NULL};
static const char *const host_keys[] = {"endpoint", "host", "hostname", "server", "servers",
                                        "brokers", NULL};

struct walk {
    const struct ferry_access *a;
    bool resolve_refs; /* worker: look inside env:/file: values of connection keys */
};

static int check_value(const struct walk *w, const char *key, const char *what, const char *v,
                       struct ferry_error *err)
{
    const struct ferry_access *a = w->a;
    if (!strncmp(v, "env:", 4)) {
        if (!ferry_access_env_allowed(a, v + 4))
            return refuse(err, what, "env",
                          "%s is not an allowed variable (default: names starting with "
                          FERRY_ACCESS_ENV_PREFIX ")",
                          v);
        if (!w->resolve_refs || !(key_is(key, conn_keys) || key_is(key, host_keys)))
            return FERRY_OK;
    } else if (!strncmp(v, "file:", 5)) {
        int rc = check_path(a, what, v + 5, &a->files, "files", err);
        if (rc || !w->resolve_refs || !(key_is(key, conn_keys) || key_is(key, host_keys)))
            return rc;
    } else if (!strncmp(v, "secret:", 7)) {
        if (!ferry_access_secret_allowed(a, v + 7))
            return refuse(err, what, "secrets", "%s is not an allowed secret name", v);
        /* the worker checks the hosts inside a stored URL, like those behind env:/file: */
        if (!w->resolve_refs || !(key_is(key, conn_keys) || key_is(key, host_keys)))
            return FERRY_OK;
    }
    char *resolved = NULL;
    if (!strncmp(v, "env:", 4) || !strncmp(v, "file:", 5) || !strncmp(v, "secret:", 7)) {
        struct ferry_error ig;
        if (ferry_secret_resolve(v, what, &resolved, &ig) != FERRY_OK) return FERRY_OK;
        v = resolved; /* the connector will report it unset */
    }
    int rc = FERRY_OK;
    if (strstr(v, "://"))
        rc = check_url(a, what, v, err);
    else if (key_is(key, path_keys))
        rc = check_path(a, what, v, &a->paths, "paths", err);
    else if (key_is(key, conn_keys) && strchr(v, '='))
        rc = check_conninfo(a, what, v, err);
    else if (key_is(key, host_keys) && v[0]) {
        char host[300];
        int port = 0;
        split_host_port(v, strlen(v), host, sizeof host, &port);
        rc = ferry_access_check_host(a, what, host, port, err);
    }
    if (resolved) ferry_secret_free(resolved);
    return rc;
}

static int walk(const struct walk *w, const struct ferry_cfg *n, const char *key,
                struct ferry_error *err)
{
    if (n == NULL) return FERRY_OK;
    if (n->kind == FERRY_CFG_SCALAR && n->scalar) {
        char what[300];
        snprintf(what, sizeof what, "%s", n->path && n->path[0] ? n->path : "(root)");
        return check_value(w, key, what, n->scalar, err);
    }
    for (int i = 0; i < n->n_children; i++) {
        const struct ferry_cfg *c = n->children[i];
        /* list items inherit their list's key: path: [a, b] */
        int rc = walk(w, c, c->key ? c->key : key, err);
        if (rc) return rc;
    }
    return FERRY_OK;
}

static bool connector_ok(const struct ferry_access *a, const char *type)
{
    if (a->allow_all || !a->connectors_set) return true;
    for (int i = 0; i < a->connectors.n; i++)
        if (!strcmp(a->connectors.v[i], type)) return true;
    return false;
}

static int check(const struct ferry_access *a, const struct ferry_pipeline_spec *p,
                 bool resolve_refs, struct ferry_error *err)
{
    if (!connector_ok(a, p->source_type))
        return refuse(err, "source.type", "connectors", "%s is not an allowed connector",
                      p->source_type);
    if (!connector_ok(a, p->sink_type))
        return refuse(err, "sink.type", "connectors", "%s is not an allowed connector",
                      p->sink_type);
    struct walk w = {.a = a, .resolve_refs = resolve_refs};
    return walk(&w, p->root, NULL, err);
}

int ferry_access_check(const struct ferry_access *a, const struct ferry_pipeline_spec *p,
                       struct ferry_error *err)
{
    return check(a, p, false, err);
}

/* ---- loading ---- */

static int load_list(struct ferry_cfg *root, const char *key, struct strv *out, bool canonical,
                     bool *set, struct ferry_error *err)
{
    char **v = NULL;
    int n = 0;
    int rc = ferry_cfg_strv(root, key, false, &v, &n, err);
    if (rc) return rc;
    if (set) *set = v != NULL;
    for (int i = 0; i < n && rc == FERRY_OK; i++) {
        char c[PATH_MAX];
        if (canonical && !canon(v[i], c))
            rc = ferry_cfg_error(err, ferry_cfg_get(root, key), "%s cannot be resolved", v[i]);
        else if (strv_add(out, canonical ? c : v[i]) != FERRY_OK)
            rc = oom(err);
    }
    ferry_cfg_strv_free(v);
    return rc;
}

int ferry_access_load(const char *spec, struct ferry_access **out, struct ferry_error *err)
{
    *out = NULL;
    struct ferry_access *a = ferry_calloc(1, sizeof *a);
    if (a == NULL) return oom(err);
    if (spec == NULL || spec[0] == '\0' || !strcmp(spec, "default")) {
        *out = a;
        return FERRY_OK;
    }
    if (!strcmp(spec, "allow-all")) {
        a->allow_all = true;
        *out = a;
        return FERRY_OK;
    }
    if (access(spec, R_OK) != 0) {
        int e = errno;
        ferry_access_free(a);
        return ferry_error_set(err, FERRY_ECONFIG, "policy",
                               "--policy %s: cannot read the policy file: %s (or use "
                               "\"allow-all\" or \"default\")",
                               spec, strerror(e));
    }
    struct ferry_cfg *root = NULL;
    int rc = ferry_cfg_parse_file(spec, &root, err);
    if (rc == FERRY_OK && root->kind != FERRY_CFG_MAP)
        rc = ferry_error_set(err, FERRY_ECONFIG, "policy",
                             "%s: a policy is a map (paths, env, files, hosts, connectors)", spec);
    if (rc == FERRY_OK) rc = load_list(root, "paths", &a->paths, true, NULL, err);
    if (rc == FERRY_OK) rc = load_list(root, "env", &a->env, false, NULL, err);
    if (rc == FERRY_OK) rc = load_list(root, "files", &a->files, true, NULL, err);
    if (rc == FERRY_OK) rc = load_list(root, "secrets", &a->secrets, false, &a->secrets_set, err);
    if (rc == FERRY_OK)
        rc = load_list(root, "connectors", &a->connectors, false, &a->connectors_set, err);
    struct strv hosts = {0};
    if (rc == FERRY_OK) rc = load_list(root, "hosts", &hosts, false, &a->hosts_set, err);
    if (rc == FERRY_OK && hosts.n > 0) {
        a->hosts = ferry_calloc((size_t)hosts.n, sizeof *a->hosts);
        if (a->hosts == NULL) rc = oom(err);
    }
    for (int i = 0; rc == FERRY_OK && i < hosts.n; i++) {
        if (!parse_host_rule(hosts.v[i], &a->hosts[i]))
            rc = ferry_cfg_error(err, ferry_cfg_get(root, "hosts"),
                                 "\"%s\" is not a host name, *.suffix, address or CIDR with an "
                                 "optional :port",
                                 hosts.v[i]);
        else
            a->n_hosts++;
    }
    strv_free(&hosts);
    if (rc == FERRY_OK) rc = ferry_cfg_check_unused(root, err);
    ferry_cfg_free(root);
    if (rc == FERRY_OK) rc = ferry_access_protect(a, spec, err);
    if (rc != FERRY_OK) {
        ferry_access_free(a);
        return rc;
    }
    *out = a;
    return FERRY_OK;
}

int ferry_access_check_from_env(const struct ferry_pipeline_spec *p, struct ferry_error *err)
{
    const char *spec = getenv("FERRY_POLICY");
    if (spec == NULL || spec[0] == '\0') return FERRY_OK;
    struct ferry_access *a = NULL;
    int rc = ferry_access_load(spec, &a, err);
    const char *prot = getenv("FERRY_POLICY_PROTECT");
    if (rc == FERRY_OK && prot) {
        char *copy = ferry_strdup(prot), *save = NULL;
        if (copy == NULL) rc = oom(err);
        for (char *s = copy ? strtok_r(copy, "\n", &save) : NULL; s && rc == FERRY_OK;
             s = strtok_r(NULL, "\n", &save))
            rc = strv_add(&a->protect, s) == FERRY_OK ? FERRY_OK : oom(err);
        ferry_free(copy);
    }
    if (rc == FERRY_OK) a->pin = true;
    if (rc == FERRY_OK) rc = check(a, p, true, err);
    ferry_access_free(a);
    return rc;
}
