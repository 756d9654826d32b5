/*
 * Tests of eas_env_parse (the scheduler settings file), built with -fsanitize=address,undefined:
 *   envfile_check SEED COUNT   fixed cases, then COUNT random files (each in an exact-size heap
 *                              buffer, so any read past its end is caught); every accepted line is
 *                              re-checked against the grammar. Exits non-zero on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../envfile.h"

struct seen {
	char names[64][EAS_ENV_NAME_MAX];
	char values[64][EAS_ENV_VALUE_MAX];
	int n;
	int bad;
};

static void collect(const char *name, const char *value, void *arg)
{
	struct seen *s = arg;
	size_t nl = strlen(name), vl = strlen(value);
	if (nl < 9 || nl > 40 || strncmp(name, "EASLURM_", 8) != 0 ||
	    strspn(name + 8, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != nl - 8)
		s->bad++;
	if (vl < 1 || vl > 64 ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") != vl)
		s->bad++;
	if (s->n < 64) {
		memcpy(s->names[s->n], name, nl + 1);
		memcpy(s->values[s->n], value, vl + 1);
	}
	s->n++;
}

static int parse(const char *text, size_t len, struct seen *s, int *rejected)
{
	char *copy = malloc(len ? len : 1);
	if (!copy)
		abort();
	memcpy(copy, text, len);
	memset(s, 0, sizeof(*s));
	int n = eas_env_parse(copy, len, collect, s, rejected);
	free(copy);
	return n;
}

static int failures;

static void expect(const char *text, int accepted, int rejected, const char *first_name,
		   const char *first_value)
{
	struct seen s;
	int rej = -1;
	int n = parse(text, strlen(text), &s, &rej);
	int ok = n == accepted && rej == rejected && s.n == n && s.bad == 0;
	if (ok && first_name)
		ok = strcmp(s.names[0], first_name) == 0 && strcmp(s.values[0], first_value) == 0;
	if (!ok) {
		fprintf(stderr, "FAIL %s: accepted %d (want %d), rejected %d (want %d)\n", text, n, accepted, rej,
			rejected);
		failures++;
	}
}

static const char *const CASES_OK =
	"EASLURM_BATCH_SIZE=128\nEASLURM_GPUS=4\nEASLURM_GPU_TYPE=a100\nEASLURM_POWER_LIMIT_W=250.5\n";

int main(int argc, char **argv)
{
	uint64_t x = argc > 1 ? strtoull(argv[1], NULL, 10) * 2654435761u + 1 : 1;
	long count = argc > 2 ? strtol(argv[2], NULL, 10) : 100000;

	expect(CASES_OK, 4, 0, "EASLURM_BATCH_SIZE", "128");
	expect("", 0, 0, NULL, NULL);
	expect("\n\n", 0, 0, NULL, NULL);
	expect("EASLURM_GPUS=8", 1, 0, "EASLURM_GPUS", "8"); /* no final newline */
	expect("EASLURM_X=a:b-c_d.e\n", 1, 0, "EASLURM_X", "a:b-c_d.e");
	expect("EASLURM_=1\n", 0, 1, NULL, NULL);            /* empty suffix */
	expect("EASLURM_gpus=1\n", 0, 1, NULL, NULL);        /* lowercase name */
	expect("EASLURM_GPU1=1\n", 0, 1, NULL, NULL);        /* digit in name */
	expect("LD_PRELOAD=/tmp/x.so\n", 0, 1, NULL, NULL);  /* foreign name */
	expect("PATH=/tmp\nEASLURM_GPUS=2\n", 1, 1, "EASLURM_GPUS", "2");
	expect("EASLURM_GPUS=\n", 0, 1, NULL, NULL);         /* empty value */
	expect("EASLURM_GPUS=1 2\n", 0, 1, NULL, NULL);      /* space */
	expect("EASLURM_GPUS=$(id)\n", 0, 1, NULL, NULL);    /* shell syntax */
	expect("EASLURM_GPUS=1/2\n", 0, 1, NULL, NULL);      /* slash */
	expect("EASLURM_GPUS=4\r\n", 0, 1, NULL, NULL);      /* CRLF */
	expect(" EASLURM_GPUS=4\n", 0, 1, NULL, NULL);       /* leading space */
	expect("EASLURM_GPUS==4\n", 0, 1, NULL, NULL);
	expect("EASLURM_ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEF=1\n", 1, 0, "EASLURM_ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEF", "1");
	expect("EASLURM_ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG=1\n", 0, 1, NULL, NULL); /* 33 chars */
	expect("EASLURM_V=0123456789012345678901234567890123456789012345678901234567890123\n", 1, 0, "EASLURM_V",
	       "0123456789012345678901234567890123456789012345678901234567890123");
	expect("EASLURM_V=01234567890123456789012345678901234567890123456789012345678901234\n", 0, 1, NULL, NULL);
	{ /* an embedded NUL makes the line bad, the next one still counts */
		struct seen s;
		int rej = 0;
		static const char nul[] = "EASLURM_A=1\0x\nEASLURM_B=2\n";
		int n = parse(nul, sizeof(nul) - 1, &s, &rej);
		if (n != 1 || rej != 1 || strcmp(s.names[0], "EASLURM_B") != 0) {
			fprintf(stderr, "FAIL embedded NUL\n");
			failures++;
		}
	}

	static const char ALPHA[] = "EASLURM_GPUSBATCH=\n=\n09az.:-_ $/\r\t\x01\xff";
	char buf[EAS_ENV_FILE_MAX + 64];
	long accepted = 0;
	for (long it = 0; it < count; it++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t n = (size_t) (x % 200);
		if (x % 7 == 0)
			n = (size_t) (x % sizeof(buf));
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			if (x % 5 == 0 && i + 8 <= n) {
				memcpy(buf + i, "EASLURM_", 8);
				i += 7;
			} else {
				buf[i] = ALPHA[x % (sizeof(ALPHA) - 1)];
			}
		}
		struct seen s;
		int rej = 0;
		int got = parse(buf, n, &s, &rej);
		if (s.bad || got != s.n || rej < 0) {
			fprintf(stderr, "FAIL random input %ld\n", it);
			return 1;
		}
		accepted += got;
	}
	printf("envfile: %d case failures; %ld random files, %ld lines accepted, all well-formed\n", failures, count,
	       accepted);
	return failures ? 1 : 0;
}
