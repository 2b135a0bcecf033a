/* net/pins.c - the approved addresses of a worker's policy check (net/pins.h). A fixed table
 * under one lock: written by the check before the connectors open, read when they connect.
 * Calls libc only. Called by config/access.c, net/http.c, connectors/postgres. */
#include "net/pins.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct pin {
    char host[256];
    int port;
    char addr[64];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pin pins[FERRY_PINS_MAX];
static int n_pins;

void ferry_pins_add(const char *host, int port, const char *addr)
{
    if (host == NULL || addr == NULL || strlen(host) >= sizeof pins[0].host ||
        strlen(addr) >= sizeof pins[0].addr)
        return;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_pins && !(pins[i].port == port && strcmp(pins[i].host, host) == 0))
        i++;
    if (i < FERRY_PINS_MAX) {
        snprintf(pins[i].host, sizeof pins[i].host, "%s", host);
        pins[i].port = port;
        snprintf(pins[i].addr, sizeof pins[i].addr, "%s", addr);
        if (i == n_pins) n_pins++;
    }
    pthread_mutex_unlock(&lock);
}

bool ferry_pins_find(const char *host, int port, char *addr, size_t len)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    for (int pass = 0; pass < 2 && !found; pass++) /* the exact port first, then "any" */
        for (int i = 0; i < n_pins && !found; i++)
            if (strcmp(pins[i].host, host) == 0 && pins[i].port == (pass ? 0 : port)) {
                snprintf(addr, len, "%s", pins[i].addr);
                found = true;
            }
    pthread_mutex_unlock(&lock);
    return found;
}

bool ferry_pins_curl_line(int i, char *out, size_t len)
{
    bool ok = false;
    pthread_mutex_lock(&lock);
    for (int k = 0, line = 0; k < n_pins && !ok; k++) {
        int ports[2] = {pins[k].port, 0}, np = 1;
        if (pins[k].port == 0) ports[0] = 80, ports[1] = 443, np = 2;
        for (int j = 0; j < np && !ok; j++, line++) {
            if (line != i) continue;
            /* an IPv6 address goes in brackets */
            bool v6 = strchr(pins[k].addr, ':') != NULL;
            snprintf(out, len, "%s:%d:%s%s%s", pins[k].host, ports[j], v6 ? "[" : "",
                     pins[k].addr, v6 ? "]" : "");
            ok = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

void ferry_pins_clear(void)
{
    pthread_mutex_lock(&lock);
    n_pins = 0;
    pthread_mutex_unlock(&lock);
}
