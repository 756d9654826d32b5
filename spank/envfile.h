/* Strict parser of the scheduler daemon's per-job settings file (<spool>/sched/job-<id>.env). */
#ifndef EASLURM_ENVFILE_H
#define EASLURM_ENVFILE_H

#include <stddef.h>

/* Largest file read; a larger file is ignored as a whole. */
#define EAS_ENV_FILE_MAX 4096
/* "EASLURM_" + at most 32 of [A-Z_], plus the NUL. */
#define EAS_ENV_NAME_MAX (8 + 32 + 1)
/* At most 64 of [A-Za-z0-9._:-], plus the NUL. */
#define EAS_ENV_VALUE_MAX (64 + 1)

typedef void (*eas_env_cb)(const char *name, const char *value, void *arg);

/*
 * Call cb(name, value, arg) for each line of buf[0..len) that matches exactly
 *   EASLURM_[A-Z_]{1,32}=[A-Za-z0-9._:-]{1,64}
 * Lines are separated by '\n'; empty lines are skipped; any other line (a NUL, '\r', a space, a
 * lowercase or foreign name, a long value) is counted in *rejected and skipped. Returns the number
 * of accepted lines. Never reads outside buf[0..len).
 */
int eas_env_parse(const char *buf, size_t len, eas_env_cb cb, void *arg, int *rejected);

#endif
