/* Strict syntax check of the --energy-profile SPEC: no allocation, no locale, bounded loops. */
#include "spec.h"

#include <stdio.h>
#include <string.h>

enum value_kind { V_DURATION, V_NAME, V_INT, V_INTLIST };

struct key_rule {
	const char *name;
	enum value_kind kind;
	double min_ms; /* durations only */
	double max_ms;
};

/* One line per key: the scheduler's workload hints are added here (and in src/easlurm/energy/spec.py). */
static const struct key_rule KEYS[] = {
	{"interval", V_DURATION, 10.0, 60000.0},
	{"deadline", V_DURATION, 1.0, 366.0 * 86400000.0},
	{"model", V_NAME, 0, 0},
	{"steps", V_INT, 0, 0},
	{"batch", V_INTLIST, 0, 0},
	{"gpus", V_INTLIST, 0, 0},
};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))

static const char *const WORDS[] = {"all", "gpu", "cpu", "dram", "urgent", "share", "nolimit"};
#define WORD_SHARE 5
#define NWORDS (sizeof(WORDS) / sizeof(WORDS[0]))

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
		return fail(err, errlen,
			    "unknown item (devices: all,gpu,cpu,dram; flags: urgent,share,nolimit; keys: "
			    "interval,deadline,model,steps,batch,gpus)",
			    item, n);
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
		}
	}
	return fail(err, errlen,
		    "unknown key (keys: interval,deadline,model,steps,batch,gpus)", item, klen);
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
