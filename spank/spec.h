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

/* How many of the nearest known names an unknown model= names. */
#define EAS_MODEL_NEAREST 3

/*
 * Check a model name against NAMES (nlen bytes, the text `easlurm model list --names` writes: one
 * spelling per line, "NAME" or "ALIAS NAME"; '#' comments), as the oracle reads names:
 * case-insensitive, '_' as '-'. Returns 0 when known; otherwise -1 with a one-line reason in err that
 * names the EAS_MODEL_NEAREST nearest names (edit distance, earlier lines first among equals).
 */
int eas_model_check(const char *names, size_t nlen, const char *model, size_t mlen, char *err, size_t errlen);

/* The value of SPEC's model= item: 1 and [*model, *model + *mlen) when there is one, else 0. */
int eas_spec_model(const char *spec, const char **model, size_t *mlen);

#endif
