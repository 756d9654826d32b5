/* Strict syntax check of the --energy-profile SPEC: no allocation, no locale, bounded loops. */
#include "spec.h"

#include <stdio.h>
#include <string.h>

enum value_kind { V_DURATION, V_NAME, V_INT, V_INTLIST, V_CHOICE };

struct key_rule {
	const char *name;
	enum value_kind kind;
	double min_ms; /* durations only */
	double max_ms;
	const char *const *choices; /* V_CHOICE only: the values allowed, NULL-terminated */
};

/* How the job trains (src/easlurm/energy/spec.py's CHOICES says the same). */
static const char *const PRECISIONS[] = {"fp32-strict", "fp32", "tf32", "amp-bf16", "amp-fp16", "bf16", "fp16",
					 NULL};
static const char *const SHARDS[] = {"none", "zero1", "zero2", "zero3", "fsdp", "auto", NULL};
static const char *const CKPTS[] = {"0", "1", "full", "selective", NULL};

/* One line per key: the scheduler's workload hints are added here (and in src/easlurm/energy/spec.py). */
static const struct key_rule KEYS[] = {
	{"interval", V_DURATION, 10.0, 60000.0, NULL},
	{"deadline", V_DURATION, 1.0, 366.0 * 86400000.0, NULL},
	{"model", V_NAME, 0, 0, NULL},
	{"steps", V_INT, 0, 0, NULL},
	{"batch", V_INTLIST, 0, 0, NULL},
	{"gpus", V_INTLIST, 0, 0, NULL},
	{"precision", V_CHOICE, 0, 0, PRECISIONS},
	{"shard", V_CHOICE, 0, 0, SHARDS},
	{"ckpt", V_CHOICE, 0, 0, CKPTS},
};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))

static const char *const WORDS[] = {"all", "gpu", "cpu", "dram", "urgent", "share", "nolimit"};
#define WORD_SHARE 5
#define NWORDS (sizeof(WORDS) / sizeof(WORDS[0]))
/* What an unknown item or key error lists: every word and key (the Python twin says the same). */
#define EVERY_ITEM                                                                                         \
	"(devices: all,gpu,cpu,dram; flags: urgent,share,nolimit; keys: "                                  \
	"interval,deadline,model,steps,batch,gpus,precision,shard,ckpt)"

#define NAME_MAX_LEN 64
#define LIST_MAX 16
#define INT_MAX_DIGITS 10
#define INT_MAX_VALUE 1000000000L

/* Reason for a rejection: a message and, when given, the offending fragment (at most 40 bytes). */
static int fail(char *err, size_t errlen, const char *what, const char *frag, size_t flen)
{
	if (err && errlen) {
		int n = (int) (flen > 40 ? 40 : flen);
		if (n > 0)
			snprintf(err, errlen, "%s: '%.*s'", what, n, frag);
		else
			snprintf(err, errlen, "%s", what);
	}
	return -1;
}

/* "unknown key 'x' (devices: ...; flags: ...; keys: ...)": the fragment, then every item there is. */
static int fail_list(char *err, size_t errlen, const char *what, const char *frag, size_t flen)
{
	if (err && errlen)
		snprintf(err, errlen, "%s '%.*s' " EVERY_ITEM, what, (int) (flen > 40 ? 40 : flen), frag);
	return -1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_name_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' ||
	       c == '-';
}

/* [1-9][0-9]* up to INT_MAX_VALUE; no sign, no leading zero. */
static int check_int(const char *v, size_t n)
{
	long value = 0;
	if (n == 0 || n > INT_MAX_DIGITS || v[0] == '0')
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(v[i]))
			return -1;
		value = value * 10 + (v[i] - '0');
	}
	return value <= INT_MAX_VALUE ? 0 : -1;
}

static int check_intlist(const char *v, size_t n)
{
	size_t start = 0, count = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i == n || v[i] == ':') {
			if (check_int(v + start, i - start) < 0 || ++count > LIST_MAX)
				return -1;
			start = i + 1;
		}
	}
	return 0;
}

/* DIGITS["."DIGITS][unit] -> milliseconds in *ms. */
static int check_duration(const char *v, size_t n, double *ms)
{
	size_t i = 0, int_digits = 0, frac_digits = 0;
	double value = 0.0, scale = 1.0;
	while (i < n && is_digit(v[i])) {
		if (++int_digits > 9)
			return -1;
		value = value * 10.0 + (v[i++] - '0');
	}
	if (int_digits == 0)
		return -1;
	if (i < n && v[i] == '.') {
		i++;
		while (i < n && is_digit(v[i])) {
			if (++frac_digits > 6)
				return -1;
			scale /= 10.0;
			value += (v[i++] - '0') * scale;
		}
		if (frac_digits == 0)
			return -1;
	}
	const char *unit = v + i;
	size_t ulen = n - i;
	double factor;
	if (ulen == 0 || (ulen == 1 && unit[0] == 's'))
		factor = 1000.0;
	else if (ulen == 2 && memcmp(unit, "ms", 2) == 0)
		factor = 1.0;
	else if ((ulen == 1 && unit[0] == 'm') || (ulen == 3 && memcmp(unit, "min", 3) == 0))
		factor = 60000.0;
	else if (ulen == 1 && unit[0] == 'h')
		factor = 3600000.0;
	else if (ulen == 1 && unit[0] == 'd')
		factor = 86400000.0;
	else
		return -1;
	*ms = value * factor;
	return 0;
}

static int check_item(const char *item, size_t n, unsigned *seen_keys, unsigned *seen_words, char *err,
		      size_t errlen)
{
	const char *eq = memchr(item, '=', n);
	if (n == 0)
		return fail(err, errlen, "empty item in SPEC", "", 0);
	if (!eq) {
		for (size_t w = 0; w < NWORDS; w++) {
			if (strlen(WORDS[w]) == n && memcmp(WORDS[w], item, n) == 0) {
				if (*seen_words & (1u << w))
					return fail(err, errlen, "item given twice", item, n);
				*seen_words |= 1u << w;
				return 0;
			}
		}
		return fail_list(err, errlen, "unknown item", item, n);
	}
	size_t klen = (size_t) (eq - item);
	const char *v = eq + 1;
	size_t vlen = n - klen - 1;
	for (size_t k = 0; k < NKEYS; k++) {
		if (strlen(KEYS[k].name) != klen || memcmp(KEYS[k].name, item, klen) != 0)
			continue;
		if (*seen_keys & (1u << k))
			return fail(err, errlen, "key given twice", item, klen);
		*seen_keys |= 1u << k;
		double ms = 0.0;
		switch (KEYS[k].kind) {
		case V_DURATION:
			if (check_duration(v, vlen, &ms) < 0)
				return fail(err, errlen, "bad duration (use e.g. 200ms, 2s, 30m, 2h)",
					    item, n);
			if (ms < KEYS[k].min_ms || ms > KEYS[k].max_ms)
				return fail(err, errlen, "duration out of range (interval: 10ms..60s)", item, n);
			return 0;
		case V_NAME:
			if (vlen == 0 || vlen > NAME_MAX_LEN)
				return fail(err, errlen, "bad name (1..64 of A-Za-z0-9._-)", item, n);
			for (size_t i = 0; i < vlen; i++)
				if (!is_name_char(v[i]))
					return fail(err, errlen, "bad name (1..64 of A-Za-z0-9._-)",
						    item, n);
			return 0;
		case V_INT:
			if (check_int(v, vlen) < 0)
				return fail(err, errlen, "bad integer (1..1000000000)", item, n);
			return 0;
		case V_INTLIST:
			if (check_intlist(v, vlen) < 0)
				return fail(err, errlen, "bad list (e.g. 1:2:4:8, at most 16 integers)",
					    item, n);
			return 0;
		case V_CHOICE:
			for (const char *const *c = KEYS[k].choices; *c; c++)
				if (strlen(*c) == vlen && memcmp(*c, v, vlen) == 0)
					return 0;
			return fail(err, errlen, "bad value (see the documented values of the key)", item, n);
		}
	}
	return fail_list(err, errlen, "unknown key", item, klen);
}

/* 'share' is for one-GPU jobs: a gpus= list, when given, must be exactly "1". */
static int check_share(const char *spec, size_t len, char *err, size_t errlen)
{
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || spec[i] == ',') {
			const char *item = spec + start;
			size_t n = i - start;
			if (n >= 5 && memcmp(item, "gpus=", 5) == 0 && !(n == 6 && item[5] == '1'))
				return fail(err, errlen, "'share' is for one-GPU jobs (use gpus=1)", item, n);
			start = i + 1;
		}
	}
	return 0;
}

int eas_spec_check(const char *spec, char *err, size_t errlen)
{
	unsigned seen_keys = 0, seen_words = 0;
	size_t len, start = 0;
	if (err && errlen)
		err[0] = '\0';
	if (!spec)
		return 0;
	len = strnlen(spec, EAS_SPEC_MAX + 1);
	if (len > EAS_SPEC_MAX)
		return fail(err, errlen, "SPEC longer than 1024 characters", "", 0);
	if (len == 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char) spec[i];
		if (!(is_name_char((char) c) || c == ',' || c == '=' || c == ':'))
			return fail(err, errlen, "invalid character in SPEC near", spec + i,
				    len - i);
	}
	for (size_t i = 0; i <= len; i++) {
		if (i == len || spec[i] == ',') {
			if (check_item(spec + start, i - start, &seen_keys, &seen_words, err, errlen) < 0)
				return -1;
			start = i + 1;
		}
	}
	/* words: bit 0 all, 1 gpu, 2 cpu, 3 dram */
	if ((seen_words & 1u) && (seen_words & 0xeu))
		return fail(err, errlen, "'all' cannot be combined with a device list", "", 0);
	if (seen_words & (1u << WORD_SHARE))
		return check_share(spec, len, err, errlen);
	return 0;
}

/* ---- model names: `model=NAME` checked against the oracle's names (a file `easlurm model list --names`
 * writes). One spelling per line, "NAME" or "ALIAS NAME" (NAME the zoo's own); '#' starts a comment.
 * A name matches as the oracle reads it: case-insensitive, '_' read as '-'. */

static char norm_char(char c)
{
	if (c >= 'A' && c <= 'Z')
		return (char) (c - 'A' + 'a');
	return c == '_' ? '-' : c;
}

/* Levenshtein distance of the normalised strings (both at most NAME_MAX_LEN bytes). */
static size_t distance(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t row[NAME_MAX_LEN + 1];
	for (size_t j = 0; j <= blen; j++)
		row[j] = j;
	for (size_t i = 1; i <= alen; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= blen; j++) {
			size_t up = row[j];
			size_t cost = norm_char(a[i - 1]) == norm_char(b[j - 1]) ? 0 : 1;
			size_t best = diag + cost;
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[blen];
}

static int same_name(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return 0;
	for (size_t i = 0; i < alen; i++)
		if (norm_char(a[i]) != norm_char(b[i]))
			return 0;
	return 1;
}

struct near {
	const char *name; /* the zoo's own name (a line's last field) */
	size_t len;
	size_t dist; /* the smallest distance of any of its spellings */
	size_t line; /* the line of that spelling: ties go to the earlier line */
};

static int nearer(const struct near *a, const struct near *b)
{
	return a->dist < b->dist || (a->dist == b->dist && a->line < b->line);
}

/* Keep the EAS_MODEL_NEAREST nearest distinct names, each at its best spelling. */
static void keep_nearest(struct near *best, size_t *nbest, struct near cand)
{
	size_t at = *nbest;
	for (size_t i = 0; i < *nbest; i++) {
		if (same_name(best[i].name, best[i].len, cand.name, cand.len)) {
			if (!nearer(&cand, &best[i]))
				return;
			at = i; /* the slot it leaves is refilled below */
			break;
		}
	}
	if (at == *nbest && *nbest == EAS_MODEL_NEAREST) {
		if (!nearer(&cand, &best[at - 1]))
			return;
		at--; /* the farthest leaves */
	} else if (at == *nbest) {
		(*nbest)++;
	}
	while (at > 0 && nearer(&cand, &best[at - 1])) {
		best[at] = best[at - 1];
		at--;
	}
	best[at] = cand;
}

/* One line's fields: [*f1, f1 + *l1) and, if present, [*f2, f2 + *l2); 0 when it holds no name. */
static int line_fields(const char *line, size_t n, const char **f1, size_t *l1, const char **f2, size_t *l2)
{
	size_t i = 0, nf = 0;
	*l1 = *l2 = 0;
	while (i < n && nf < 2) {
		while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
			i++;
		if (i >= n || line[i] == '#')
			break;
		size_t start = i;
		while (i < n && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '#')
			i++;
		if (i - start > NAME_MAX_LEN)
			return 0; /* not a name a SPEC can carry */
		if (nf++ == 0) {
			*f1 = line + start;
			*l1 = i - start;
		} else {
			*f2 = line + start;
			*l2 = i - start;
		}
	}
	return *l1 > 0;
}

int eas_model_check(const char *names, size_t nlen, const char *model, size_t mlen, char *err, size_t errlen)
{
	struct near best[EAS_MODEL_NEAREST];
	size_t nbest = 0, start = 0, line = 0;
	if (err && errlen)
		err[0] = '\0';
	if (mlen == 0 || mlen > NAME_MAX_LEN)
		return fail(err, errlen, "bad name (1..64 of A-Za-z0-9._-)", model, mlen);
	for (size_t i = 0; i <= nlen; i++) {
		if (i < nlen && names[i] != '\n' && names[i] != '\0')
			continue;
		const char *f1 = NULL, *f2 = NULL;
		size_t l1 = 0, l2 = 0;
		if (line_fields(names + start, i - start, &f1, &l1, &f2, &l2)) {
			if (same_name(f1, l1, model, mlen))
				return 0;
			struct near cand = {l2 ? f2 : f1, l2 ? l2 : l1, distance(model, mlen, f1, l1), line};
			keep_nearest(best, &nbest, cand);
		}
		line++;
		start = i + 1;
		if (i < nlen && names[i] == '\0')
			break;
	}
	if (err && errlen) {
		int w = snprintf(err, errlen, "unknown model= '%.*s' (nearest:", (int) (mlen > 40 ? 40 : mlen), model);
		for (size_t k = 0; k < nbest && w >= 0 && (size_t) w < errlen; k++)
			w += snprintf(err + w, errlen - (size_t) w, "%s %.*s", k ? "," : "", (int) best[k].len,
				      best[k].name);
		if (w >= 0 && (size_t) w < errlen)
			snprintf(err + w, errlen - (size_t) w, "%s; every name: easlurm model list --names)",
				 nbest ? "" : " none");
	}
	return -1;
}

int eas_spec_model(const char *spec, const char **model, size_t *mlen)
{
	size_t len = spec ? strnlen(spec, EAS_SPEC_MAX + 1) : 0, start = 0;
	*model = NULL;
	*mlen = 0;
	if (len > EAS_SPEC_MAX)
		return 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || spec[i] == ',') {
			if (i - start >= 6 && memcmp(spec + start, "model=", 6) == 0) {
				*model = spec + start + 6;
				*mlen = i - start - 6;
				return 1;
			}
			start = i + 1;
		}
	}
	return 0;
}
