/* cli/commands.h - entry points of the commands that live in their own cmd_*.c files;
 * main.c dispatches to them before its own option parsing (each parses its own argv,
 * argv[1] being the command name). */
#ifndef FERRY_CLI_COMMANDS_H
#define FERRY_CLI_COMMANDS_H

int ferry_cli_serve(int argc, char **argv);   /* cmd_serve.c */
int ferry_cli_worker(int argc, char **argv);  /* cmd_worker.c */
int ferry_cli_verify(int argc, char **argv);  /* cmd_verify.c */
/* cmd_verify.c: `ferry show` lines for the run's last verify.completed of a resource
 * (verify: after_run); adds "verify" to the resource's JSON object jr. */
struct ferry_store;
struct json_t;
void ferry_cli_verify_show(struct ferry_store *st, long long run, const char *resource, int json,
                           struct json_t *jr);
int ferry_cli_pipelines(int argc, char **argv); /* cmd_pipelines.c: pipelines apply FILE */
/* cmd_runs_remote.c: `runs start|watch` (a server with --server/FERRY_SERVER, else the
 * local state); main.c keeps plain `runs`, the local listing. */
int ferry_cli_runs_remote(int argc, char **argv);
/* cmd_ops.c: `schedules add|list|rm` (through a server), `runs retry RUN`. */
int ferry_cli_schedules(int argc, char **argv);
int ferry_cli_runs_retry(int argc, char **argv);
/* cmd_cdc.c: `cdc drop FILE`; the --follow epoch wait (false when a signal arrived: stop);
 * duration text ("10s", "500ms") -> ms, 0 or -1. ferry_cli_signaled is set by main.c's
 * signal handler. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
extern volatile sig_atomic_t ferry_cli_signaled;
int ferry_cli_cdc(int argc, char **argv);
bool ferry_cli_cdc_next_epoch(bool at_once, int64_t started_mono_us, int64_t epoch_ms);
int ferry_cli_parse_duration_ms(const char *s, int64_t *out);
/* `ferry show`: a cdc resource's last reported position and lag (from its
 * cursor.watermark_advanced events); printed, or added to jr as "cdc". */
struct ferry_store;
typedef struct json_t json_t;
void ferry_cli_cdc_show(struct ferry_store *st, int64_t run_id, const char *resource, bool json,
                        json_t *jr);

int ferry_cli_iceberg(int argc, char **argv); /* cmd_iceberg.c: iceberg expire TABLE ... */
int ferry_cli_copy(int argc, char **argv);    /* cmd_copy.c: copy SOURCE DEST [--tables P] */
int ferry_cli_secrets(int argc, char **argv); /* cmd_secrets.c: secrets put|list|rm|rotate-key */

#endif
