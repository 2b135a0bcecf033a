/* net/pins.h - the addresses a worker's policy check approved, so the connectors connect to
 * exactly those (docs/security.md: no DNS rebinding between the check and the connect).
 *
 * The worker's second policy check (config/access.c, ferry_access_check_from_env) resolves
 * each host name a pipeline names and records the approved address here (one per host and
 * port; a later record of the same host and port replaces it). The HTTP client (net/http.c)
 * hands every pin to libcurl (CURLOPT_RESOLVE), the PostgreSQL connectors pass it as
 * libpq's hostaddr: neither resolves the name again. Address literals are never pinned.
 * Thread-safe (one lock); a process holds at most FERRY_PINS_MAX pins (more are dropped,
 * and those hosts are resolved again by the connector, as without a policy). */
#ifndef FERRY_NET_PINS_H
#define FERRY_NET_PINS_H

#include <stdbool.h>
#include <stddef.h>

#define FERRY_PINS_MAX 64

/* Records host:port -> addr (numeric). port 0: any port. */
void ferry_pins_add(const char *host, int port, const char *addr);
/* The pinned address of host for port (or for any port); false when none. */
bool ferry_pins_find(const char *host, int port, char *addr, size_t len);
/* Pin i as libcurl's CURLOPT_RESOLVE line "host:port:addr" (port 0 gives two lines, 80 and
 * 443, i counting both); false past the last. */
bool ferry_pins_curl_line(int i, char *out, size_t len);
/* Forgets every pin (tests). */
void ferry_pins_clear(void);

#endif
