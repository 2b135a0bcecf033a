/* store/fault_vfs.c - a SQLite VFS shim that makes the state file's writes and fsyncs fail on
 * purpose (failpoints store_write and store_fsync, see ferry/failpoint.h).
 *
 * Owns one VFS, "ferry-fault", registered (never as the default) the first time a store is
 * opened while FERRY_FAILPOINTS names one of its failpoints; otherwise nothing is registered
 * and ferry__store_fault_vfs returns NULL, so SQLite uses its default VFS with no extra
 * indirection. Calls SQLite's VFS API and the failpoint table. Called by ferry_store_open
 * (store/sqlite_store.c), which passes the returned name to sqlite3_open_v2.
 *
 * The shim wraps whatever the default VFS is (unix on Linux): each open file is our small
 * header followed by the real VFS's file object, and every method forwards to the real one,
 * except that xSync consults store_fsync and xWrite store_write first. `error` and `enospc`
 * are the two actions that mean something here: a failed fsync is SQLITE_IOERR_FSYNC with
 * errno EIO (what the kernel reports after a lost write-back), a failed write is
 * SQLITE_IOERR_WRITE (EIO) or SQLITE_FULL (ENOSPC), so the store's usual error path, which
 * names the state file, is what a test sees. `crash` and `sleep(MS)` work as everywhere. */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "ferry/failpoint.h"
#include "store/store.h"

#define FAULT_VFS_NAME "ferry-fault"

struct fault_file {
    sqlite3_file base;  /* pMethods = &fault_io */
    sqlite3_file *real; /* follows this header in the same allocation */
};

static sqlite3_vfs fault_vfs;
static sqlite3_vfs *real_vfs;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered;

#define REAL(f) (((struct fault_file *)(f))->real)

static int f_close(sqlite3_file *f)
{
    sqlite3_file *r = REAL(f);
    return r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
}

static int f_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}

static int f_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    switch (FERRY_FAILPOINT("store_write")) {
    case FERRY_FP_ERROR: errno = EIO; return SQLITE_IOERR_WRITE;
    case FERRY_FP_ENOSPC: errno = ENOSPC; return SQLITE_FULL;
    default: break;
    }
    return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int f_sync(sqlite3_file *f, int flags)
{
    switch (FERRY_FAILPOINT("store_fsync")) {
    case FERRY_FP_ERROR: errno = EIO; return SQLITE_IOERR_FSYNC;
    case FERRY_FP_ENOSPC: errno = ENOSPC; return SQLITE_FULL;
    default: break;
    }
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int f_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int f_lock(sqlite3_file *f, int lock)
{
    return REAL(f)->pMethods->xLock(REAL(f), lock);
}

static int f_unlock(sqlite3_file *f, int lock)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), lock);
}

static int f_check_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int f_file_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int f_sector_size(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int f_device_characteristics(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

/* The shared-memory and mmap slots exist only from io_methods versions 2 and 3; the file
 * keeps the real version's answer when a slot is missing (WAL needs version 2). */
static int f_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    if (m->iVersion < 2 || m->xShmMap == NULL) return SQLITE_IOERR_SHMMAP;
    return m->xShmMap(REAL(f), pg, pgsz, extend, pp);
}

static int f_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    if (m->iVersion < 2 || m->xShmLock == NULL) return SQLITE_IOERR_SHMLOCK;
    return m->xShmLock(REAL(f), offset, n, flags);
}

static void f_shm_barrier(sqlite3_file *f)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    if (m->iVersion >= 2 && m->xShmBarrier != NULL) m->xShmBarrier(REAL(f));
}

static int f_shm_unmap(sqlite3_file *f, int delete_flag)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    if (m->iVersion < 2 || m->xShmUnmap == NULL) return SQLITE_OK;
    return m->xShmUnmap(REAL(f), delete_flag);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    *pp = NULL;
    if (m->iVersion < 3 || m->xFetch == NULL) return SQLITE_OK;
    return m->xFetch(REAL(f), off, n, pp);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    const sqlite3_io_methods *m = REAL(f)->pMethods;
    if (m->iVersion < 3 || m->xUnfetch == NULL) return SQLITE_OK;
    return m->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods fault_io = {
    .iVersion = 3,
    .xClose = f_close,
    .xRead = f_read,
    .xWrite = f_write,
    .xTruncate = f_truncate,
    .xSync = f_sync,
    .xFileSize = f_file_size,
    .xLock = f_lock,
    .xUnlock = f_unlock,
    .xCheckReservedLock = f_check_reserved,
    .xFileControl = f_file_control,
    .xSectorSize = f_sector_size,
    .xDeviceCharacteristics = f_device_characteristics,
    .xShmMap = f_shm_map,
    .xShmLock = f_shm_lock,
    .xShmBarrier = f_shm_barrier,
    .xShmUnmap = f_shm_unmap,
    .xFetch = f_fetch,
    .xUnfetch = f_unfetch,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
    (void)vfs;
    struct fault_file *ff = (struct fault_file *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    ff->base.pMethods = NULL;
    int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out_flags);
    /* SQLite calls xClose only when pMethods is set; the real VFS sets its own on success. */
    if (ff->real->pMethods != NULL) ff->base.pMethods = &fault_io;
    return rc;
}

/* Everything else about names, time and randomness is the real VFS's business. */
static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return real_vfs->xDelete(real_vfs, name, sync_dir);
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}

static int v_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}

static void *v_dl_open(sqlite3_vfs *vfs, const char *name)
{
    (void)vfs;
    return real_vfs->xDlOpen(real_vfs, name);
}

static void v_dl_error(sqlite3_vfs *vfs, int n, char *msg)
{
    (void)vfs;
    real_vfs->xDlError(real_vfs, n, msg);
}

static void (*v_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    (void)vfs;
    return real_vfs->xDlSym(real_vfs, h, sym);
}

static void v_dl_close(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    real_vfs->xDlClose(real_vfs, h);
}

static int v_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xRandomness(real_vfs, n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return real_vfs->xSleep(real_vfs, us);
}

static int v_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return real_vfs->xCurrentTime(real_vfs, out);
}

static int v_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return real_vfs->xGetLastError ? real_vfs->xGetLastError(real_vfs, n, out) : 0;
}

static int v_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    if (real_vfs->iVersion >= 2 && real_vfs->xCurrentTimeInt64 != NULL)
        return real_vfs->xCurrentTimeInt64(real_vfs, out);
    double d = 0;
    int rc = real_vfs->xCurrentTime(real_vfs, &d);
    *out = (sqlite3_int64)(d * 86400000.0);
    return rc;
}

/* True when FERRY_FAILPOINTS names a failpoint this shim serves. Read from the environment,
 * not from the parsed table, so that a store opened before ferry_failpoints_init (or by a
 * tool that never calls it) still gets the shim; the table decides whether it fires. */
static int wanted(void)
{
    const char *spec = getenv("FERRY_FAILPOINTS");
    return spec != NULL &&
           (strstr(spec, "store_fsync") != NULL || strstr(spec, "store_write") != NULL);
}

static void register_once(void)
{
    if (!wanted()) return;
    real_vfs = sqlite3_vfs_find(NULL);
    if (real_vfs == NULL) return;
    fault_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct fault_file) + real_vfs->szOsFile,
        .mxPathname = real_vfs->mxPathname,
        .zName = FAULT_VFS_NAME,
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_full_pathname,
        .xDlOpen = v_dl_open,
        .xDlError = v_dl_error,
        .xDlSym = v_dl_sym,
        .xDlClose = v_dl_close,
        .xRandomness = v_randomness,
        .xSleep = v_sleep,
        .xCurrentTime = v_current_time,
        .xGetLastError = v_get_last_error,
        .xCurrentTimeInt64 = v_current_time_int64,
    };
    registered = sqlite3_vfs_register(&fault_vfs, 0) == SQLITE_OK;
}

const char *ferry__store_fault_vfs(void)
{
    pthread_once(&once, register_once);
    return registered ? FAULT_VFS_NAME : NULL;
}
