/* Strict syntax check of the --energy-profile SPEC (semantics are checked again in Python). */
#ifndef EASLURM_SPEC_H
#define EASLURM_SPEC_H

#include <stddef.h>

/* Longest SPEC accepted; longer strings are rejected, never truncated. */
#define EAS_SPEC_MAX 1024

/*
 * Validate SPEC. Grammar (items separated by ',', no spaces, each key at most once):
 *   item   := "all" | "gpu" | "cpu" | "dram" | "urgent" | key "=" value
 *   interval=DURATION (10ms..60s)    deadline=DURATION (> 0)
 *   model=NAME ([A-Za-z0-9._-]{1,64}) steps=INT (1..10^9)
 *   batch=INT(:INT)*  gpus=INT(:INT)*  (at most 16 values)
 *   DURATION := DIGITS["." DIGITS] ["ms" | "s" | "m" | "min" | "h" | "d"]
 * An empty SPEC (a bare --energy-profile) is valid and means "all devices".
 * Returns 0 when valid; otherwise -1 with a one-line reason in err (always NUL-terminated).
 */
int eas_spec_check(const char *spec, char *err, size_t errlen);

#endif
