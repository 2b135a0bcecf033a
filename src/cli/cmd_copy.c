/* cli/cmd_copy.c - `ferry copy SOURCE DEST [--tables P]... [--exclude P]... [--follow]`: the
 * common case in one line. It writes the equivalent pipeline file (to --save FILE, else
 * beside the state database as copy-<id>.yaml, <id> derived from the arguments so the same
 * command resumes its interrupted run) and then runs it exactly as `ferry run FILE` would
 * (it execs the same binary), so everything `ferry run` guarantees holds.
 *
 * SOURCE and DEST are connection references (env:NAME holding a URL), URLs without a
 * password (postgres://, postgresql://, mysql://, mariadb://: libpq's PGPASSWORD/.pgpass or the
 * server's socket authentication supply it), or SQLite files (sqlite:PATH, or a path ending
 * .db, .sqlite, .sqlite3). A URL with a password is refused: it would show in the process
 * list and the saved file. Defaults: every table of the source's default schema
 * (`--tables '*'`), write: replace for a copy (a re-run replaces, never doubles), merge with
 * --follow (snapshot then change data capture). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "ferry/core.h"

static const char *usage_copy =
    "usage: ferry copy SOURCE DEST [--tables PATTERN]... [--exclude PATTERN]... [--follow]\n"
    "                  [--write append|replace|upsert|merge] [--schema NAME] [--name NAME]\n"
    "                  [--save FILE] [--state PATH] [--json] [--quiet] [--fresh]\n\n"
    "Copies the tables SOURCE holds that match PATTERN (default: every table of its default\n"
    "schema) into DEST, then with --follow keeps following their changes (cdc, postgres).\n"
    "SOURCE, DEST: env:NAME (a variable holding the URL), a URL without a password\n"
    "(postgres://USER@HOST:PORT/DB, mysql://USER@HOST:PORT/DB), or sqlite:PATH / FILE.db.\n"
    "The equivalent pipeline file is written to --save FILE (or beside the state database)\n"
    "and run as `ferry run FILE` would; the same command again resumes an interrupted copy.\n";

enum kind { K_NONE, K_POSTGRES, K_MYSQL, K_SQLITE };

struct endpoint {
    const char *arg;   /* as given */
    enum kind kind;
    const char *value; /* the url: reference or plain URL; or the sqlite path */
};

static bool has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static enum kind url_kind(const char *url)
{
    if (has_prefix(url, "postgres://") || has_prefix(url, "postgresql://")) return K_POSTGRES;
    if (has_prefix(url, "mysql://") || has_prefix(url, "mariadb://")) return K_MYSQL;
    return K_NONE;
}

/* "scheme://user:password@host": a password in the userinfo, or a password= parameter. */
static bool url_has_password(const char *url)
{
    const char *s = strstr(url, "://");
    if (s == NULL) return false;
    s += 3;
    const char *end = s + strcspn(s, "/?#");
    const char *at = NULL;
    for (const char *c = s; c < end; c++)
        if (*c == '@') at = c;
    if (at && memchr(s, ':', (size_t)(at - s))) return true;
    return strstr(url, "password=") != NULL;
}

static int resolve_endpoint(struct endpoint *e, const char *what)
{
    const char *a = e->arg;
    if (has_prefix(a, "env:")) {
        const char *v = getenv(a + 4);
        if (a[4] == '\0' || v == NULL) {
            fprintf(stderr, "ferry: copy: %s %s: the variable %s is not set\n", what, a, a + 4);
            return 2;
        }
        e->kind = url_kind(v);
        e->value = a; /* the reference, never its value */
        if (e->kind == K_NONE) {
            fprintf(stderr, "ferry: copy: %s %s: its value is not a postgres:// or mysql:// URL\n",
                    what, a);
            return 2;
        }
        return 0;
    }
    if (has_prefix(a, "sqlite:") || ends_with(a, ".db") || ends_with(a, ".sqlite") ||
        ends_with(a, ".sqlite3")) {
        e->kind = K_SQLITE;
        e->value = has_prefix(a, "sqlite:") ? a + 7 : a;
        return 0;
    }
    e->kind = url_kind(a);
    if (e->kind == K_NONE) {
        fprintf(stderr,
                "ferry: copy: %s %s: expected env:NAME, postgres://..., mysql://..., sqlite:PATH "
                "or a .db file\n",
                what, a);
        return 2;
    }
    if (url_has_password(a)) {
        fprintf(stderr,
                "ferry: copy: %s: a password on the command line shows in the process list and "
                "the saved pipeline; put the URL in a variable and pass env:NAME (or use "
                "PGPASSWORD / ~/.pgpass)\n",
                what);
        return 2;
    }
    e->value = a;
    return 0;
}

static const char *kind_type(enum kind k)
{
    return k == K_POSTGRES ? "postgres" : k == K_MYSQL ? "mysql" : "sqlite";
}

/* A YAML double-quoted scalar: JSON's string escaping is valid YAML. */
static int put_str(FILE *f, const char *s)
{
    json_t *j = json_string(s);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    int rc = t ? fputs(t, f) : EOF;
    free(t);
    json_decref(j);
    return rc == EOF ? -1 : 0;
}

static int put_list(FILE *f, const char *key, char **v, int n)
{
    fprintf(f, "      %s: [", key);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        if (put_str(f, v[i])) return -1;
    }
    fputs("]\n", f);
    return 0;
}

struct copy_opts {
    char **tables;
    int n_tables;
    char **exclude;
    int n_exclude;
    bool follow;
    const char *write;
    const char *schema;
    const char *name;
};

static int write_endpoint(FILE *f, const struct endpoint *e)
{
    fprintf(f, "  type: %s\n", kind_type(e->kind));
    fputs(e->kind == K_SQLITE ? "  path: " : "  url: ", f);
    if (put_str(f, e->value)) return -1;
    fputc('\n', f);
    return 0;
}

static int write_pipeline(const char *path, const struct endpoint *src, const struct endpoint *dst,
                          const struct copy_opts *o)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    fchmod(fileno(f), 0600);
    int rc = 0;
    fprintf(f, "# written by: ferry copy (run it again with: ferry run %s)\nversion: 1\nname: ", path);
    rc |= put_str(f, o->name);
    fputs("\nsource:\n", f);
    rc |= write_endpoint(f, src);
    fputs("  resources:\n    - mode: ", f);
    fputs(o->follow ? "cdc\n" : "full\n", f);
    char *all[] = {"*"};
    rc |= put_list(f, "tables", o->n_tables ? o->tables : all, o->n_tables ? o->n_tables : 1);
    if (o->n_exclude) rc |= put_list(f, "exclude", o->exclude, o->n_exclude);
    fputs("sink:\n", f);
    rc |= write_endpoint(f, dst);
    if (o->schema && dst->kind != K_SQLITE) {
        fputs("  schema: ", f);
        rc |= put_str(f, o->schema);
        fputc('\n', f);
    }
    fprintf(f, "  write: %s\n", o->write ? o->write : o->follow ? "merge" : "replace");
    if (fclose(f) != 0) rc = -1;
    if (rc) fprintf(stderr, "ferry: copy: cannot write %s\n", path);
    return rc;
}

/* copy-<12 hex of SHA-256 over the arguments that define the copy>. */
static char *default_name(const struct endpoint *src, const struct endpoint *dst,
                          const struct copy_opts *o)
{
    struct ferry_sha256 h;
    ferry_sha256_init(&h);
    const char *parts[] = {src->value, "\n", dst->value, "\n", o->follow ? "cdc\n" : "full\n",
                           o->write ? o->write : "", "\n", o->schema ? o->schema : "", "\n"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        ferry_sha256_update(&h, parts[i], strlen(parts[i]));
    for (int i = 0; i < o->n_tables; i++) ferry_sha256_update(&h, o->tables[i], strlen(o->tables[i]) + 1);
    ferry_sha256_update(&h, "\n", 1);
    for (int i = 0; i < o->n_exclude; i++) ferry_sha256_update(&h, o->exclude[i], strlen(o->exclude[i]) + 1);
    uint8_t d[32];
    ferry_sha256_final(&h, d);
    return ferry_asprintf("copy-%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5]);
}

/* Where the pipeline file goes without --save: the state database's folder. */
static char *default_path(const char *state, const char *name)
{
    const char *st = state ? state : getenv("FERRY_STATE");
    char *dir = NULL;
    if (st && *st && !strstr(st, "://")) {
        const char *slash = strrchr(st, '/');
        dir = slash ? ferry_strndup(st, (size_t)(slash - st)) : ferry_strdup(".");
    } else {
        dir = ferry_strdup(".ferry");
        mkdir(".ferry", 0700);
    }
    char *path = dir ? ferry_asprintf("%s/%s.yaml", *dir ? dir : "/", name) : NULL;
    ferry_free(dir);
    return path;
}

static int push(char ***v, int *n, const char *s)
{
    char **nv = ferry_realloc(*v, (size_t)(*n + 2) * sizeof *nv);
    if (nv == NULL) return -1;
    nv[(*n)++] = (char *)s;
    nv[*n] = NULL;
    *v = nv;
    return 0;
}

int ferry_cli_copy(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"tables", required_argument, NULL, 't'}, {"exclude", required_argument, NULL, 'x'},
        {"follow", no_argument, NULL, 'f'},       {"write", required_argument, NULL, 'w'},
        {"schema", required_argument, NULL, 'c'}, {"name", required_argument, NULL, 'n'},
        {"save", required_argument, NULL, 's'},   {"state", required_argument, NULL, 'S'},
        {"json", no_argument, NULL, 'j'},         {"quiet", no_argument, NULL, 'q'},
        {"fresh", no_argument, NULL, 'F'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    struct copy_opts o = {0};
    const char *save = NULL, *state = NULL;
    char **pass = NULL; /* options handed on to `ferry run` */
    int n_pass = 0, ch, status = 2;
    optind = 1;
    while ((ch = getopt_long(argc - 1, argv + 1, "h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 't': bad = push(&o.tables, &o.n_tables, optarg); break;
        case 'x': bad = push(&o.exclude, &o.n_exclude, optarg); break;
        case 'f': o.follow = true; break;
        case 'w': o.write = optarg; break;
        case 'c': o.schema = optarg; break;
        case 'n': o.name = optarg; break;
        case 's': save = optarg; break;
        case 'S': state = optarg; break;
        case 'j': bad = push(&pass, &n_pass, "--json"); break;
        case 'q': bad = push(&pass, &n_pass, "--quiet"); break;
        case 'F': bad = push(&pass, &n_pass, "--fresh"); break;
        case 'h': fputs(usage_copy, stdout); status = 0; goto out;
        default: fputs(usage_copy, stderr); goto out;
        }
        if (bad) goto oom;
    }
    if (argc - 1 - optind != 2) {
        fprintf(stderr, "ferry: copy needs a SOURCE and a DEST\n%s", usage_copy);
        goto out;
    }
    struct endpoint src = {.arg = argv[1 + optind]}, dst = {.arg = argv[2 + optind]};
    if (resolve_endpoint(&src, "SOURCE") || resolve_endpoint(&dst, "DEST")) goto out;
    if (o.write && strcmp(o.write, "append") && strcmp(o.write, "replace") &&
        strcmp(o.write, "upsert") && strcmp(o.write, "merge")) {
        fprintf(stderr, "ferry: copy: --write %s: expected append, replace, upsert or merge\n", o.write);
        goto out;
    }
    char *name = o.name ? ferry_strdup(o.name) : default_name(&src, &dst, &o);
    char *path = name ? (save ? ferry_strdup(save) : default_path(state, name)) : NULL;
    if (!name || !path) {
        ferry_free(name);
        ferry_free(path);
        goto oom;
    }
    o.name = name;
    if (write_pipeline(path, &src, &dst, &o)) {
        status = 1;
        ferry_free(name);
        ferry_free(path);
        goto out;
    }
    /* ferry run PATH [--state S] [--follow] [passed options] */
    char *args[16];
    int na = 0;
    args[na++] = argv[0];
    args[na++] = "run";
    args[na++] = path;
    if (state) args[na++] = "--state", args[na++] = (char *)state;
    if (o.follow) args[na++] = "--follow";
    for (int i = 0; i < n_pass && na < 15; i++) args[na++] = pass[i];
    args[na] = NULL;
    fflush(NULL);
    execv("/proc/self/exe", args);
    perror("ferry: copy: cannot run the pipeline");
    status = 1;
    ferry_free(name);
    ferry_free(path);
    goto out;
oom:
    fprintf(stderr, "ferry: copy: out of memory\n");
    status = 1;
out:
    ferry_free(o.tables);
    ferry_free(o.exclude);
    ferry_free(pass);
    return status;
}
