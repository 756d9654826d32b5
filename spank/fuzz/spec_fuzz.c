/*
 * Fuzz harness for eas_spec_check. Two modes:
 *   spec_fuzz SEED COUNT     deterministic random inputs (mutations of valid SPECs and raw bytes),
 *                            built with -fsanitize=address,undefined; exits non-zero on any finding
 *   spec_fuzz --check FILE [NAMES]
 *                            one "expect<TAB>spec[<TAB>with-names]" case per line (expect: ok|bad), the
 *                            same file the Python parser is tested against, so the two parsers agree.
 *                            With NAMES (a model names file), a case's verdict is its third column when
 *                            it has one (ok, or bad:N1,N2,N3: the nearest names the error must list),
 *                            its first otherwise; model= is then checked against NAMES.
 * With -DLIBFUZZER it is a libFuzzer target instead (clang -fsanitize=fuzzer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../spec.h"

static int check_one(const uint8_t *data, size_t size)
{
	char buf[EAS_SPEC_MAX + 64];
	char err[256];
	size_t n = size < sizeof(buf) - 1 ? size : sizeof(buf) - 1;
	memcpy(buf, data, n);
	buf[n] = '\0';
	memset(err, 0x55, sizeof(err));
	int rc = eas_spec_check(buf, err, sizeof(err));
	if (rc != 0 && rc != -1)
		abort();
	if (rc == -1 && (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0'))
		abort(); /* a rejection always carries a terminated, non-empty reason */
	/* Properties: a valid SPEC contains only the allowed alphabet and no empty item. */
	size_t slen = strlen(buf);
	if (rc == 0 && slen > 0) {
		for (size_t i = 0; i < slen; i++)
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-,=:", buf[i]))
				abort();
		if (buf[0] == ',' || buf[slen - 1] == ',' || strstr(buf, ",,"))
			abort();
	}
	/* The model check: on the SPEC's model= against a fixed names text, and on the input as a names text. */
	static const char names[] = "# names\nresnet50\nvit-b16\n\tresnet-50  resnet50 # alias\n\n";
	const char *model;
	size_t mlen;
	char merr[96];
	if (rc == 0 && eas_spec_model(buf, &model, &mlen)) {
		memset(merr, 0x55, sizeof(merr));
		int mrc = eas_model_check(names, sizeof(names) - 1, model, mlen, merr, sizeof(merr));
		if (mrc != 0 && (mrc != -1 || memchr(merr, '\0', sizeof(merr)) == NULL || merr[0] == '\0'))
			abort();
	}
	memset(merr, 0x55, sizeof(merr));
	int nrc = eas_model_check(buf, n, "resnet5O", 8, merr, sizeof(merr));
	if (nrc != 0 && (nrc != -1 || memchr(merr, '\0', sizeof(merr)) == NULL || merr[0] == '\0'))
		abort();
	/* A tiny error buffer must still be terminated. */
	char small[4];
	if (eas_spec_check(buf, small, sizeof(small)) == -1 && memchr(small, '\0', sizeof(small)) == NULL)
		abort();
	return rc;
}

#ifdef LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_one(data, size);
	return 0;
}
#else
static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static const char *const SEEDS[] = {
	"", "all", "gpu,cpu,dram", "gpu", "interval=200ms", "all,interval=1s",
	"model=vit-b16,steps=20000,batch=64:128:256,gpus=1:2:4:8,deadline=2h,urgent",
	"gpu,interval=10ms,model=ResNet_50.v2", "deadline=1.5d,steps=1",
};
static const char ALPHABET[] = "abcdefgilmnoprstuvwxyz0123456789.,=:-_ \t|;'\"$`\\/\x01\xff";

static char names_buf[1 << 16];
static size_t names_len;

static int load_names(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		return -1;
	}
	names_len = fread(names_buf, 1, sizeof(names_buf) - 1, f);
	names_buf[names_len] = '\0';
	fclose(f);
	return 0;
}

/* The verdict for SPEC, with the model names when loaded; err gets the reason. */
static int verdict(const char *spec, int with_names, char *err, size_t errlen)
{
	const char *model;
	size_t mlen;
	int rc = eas_spec_check(spec, err, errlen);
	if (rc == 0 && with_names && eas_spec_model(spec, &model, &mlen))
		rc = eas_model_check(names_buf, names_len, model, mlen, err, errlen);
	return rc;
}

/* "bad:a,b,c": the error must name exactly these nearest names, in this order. */
static int nearest_match(const char *want, const char *err)
{
	char expect[256];
	const char *at = strstr(err, "(nearest: ");
	if (!at)
		return 0;
	at += strlen("(nearest: ");
	size_t n = 0;
	for (const char *w = want; *w && n + 3 < sizeof(expect); w++) {
		if (*w == ',') {
			expect[n++] = ',';
			expect[n++] = ' ';
		} else {
			expect[n++] = *w;
		}
	}
	expect[n] = '\0';
	return strncmp(at, expect, n) == 0 && at[n] == ';';
}

static int run_check_file(const char *path, int with_names)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int failures = 0, cases = 0;
	if (!f) {
		perror(path);
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t len = strcspn(line, "\n");
		line[len] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = '\0';
		char *spec = tab + 1, *expect = line, *third = strchr(spec, '\t');
		if (third)
			*third++ = '\0';
		if (with_names && third)
			expect = third;
		int want_ok = strcmp(expect, "ok") == 0;
		char err[512];
		int rc = verdict(spec, with_names, err, sizeof(err));
		cases++;
		int match = (rc == 0) == want_ok;
		if (match && !want_ok && strncmp(expect, "bad:", 4) == 0)
			match = nearest_match(expect + 4, err);
		if (!match) {
			fprintf(stderr, "MISMATCH expect=%s spec='%s' err='%s'\n", expect, spec, err);
			failures++;
		}
	}
	fclose(f);
	printf("%d cases, %d mismatches\n", cases, failures);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "--check") == 0) {
		if (argc == 4 && load_names(argv[3]) < 0)
			return 2;
		return run_check_file(argv[2], argc == 4);
	}
	rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) * 2654435761u + 1 : 1;
	long count = argc > 2 ? strtol(argv[2], NULL, 10) : 100000;
	long valid = 0;
	uint8_t buf[EAS_SPEC_MAX + 40];
	for (long it = 0; it < count; it++) {
		size_t n;
		if (rnd() % 4 == 0) { /* raw bytes, sometimes longer than the limit */
			n = rnd() % sizeof(buf);
			for (size_t i = 0; i < n; i++)
				buf[i] = rnd() % 4 ? (uint8_t) ALPHABET[rnd() % (sizeof(ALPHABET) - 1)] : (uint8_t) rnd();
		} else { /* mutate a valid seed: replace, insert, delete, duplicate */
			const char *s = SEEDS[rnd() % (sizeof(SEEDS) / sizeof(SEEDS[0]))];
			n = strlen(s);
			memcpy(buf, s, n);
			int muts = (int) (rnd() % 4);
			for (int m = 0; m < muts; m++) {
				size_t pos = n ? rnd() % (n + 1) : 0;
				switch (rnd() % 4) {
				case 0:
					if (pos < n)
						buf[pos] = (uint8_t) ALPHABET[rnd() % (sizeof(ALPHABET) - 1)];
					break;
				case 1:
					if (n + 1 < sizeof(buf)) {
						memmove(buf + pos + 1, buf + pos, n - pos);
						buf[pos] = (uint8_t) ALPHABET[rnd() % (sizeof(ALPHABET) - 1)];
						n++;
					}
					break;
				case 2:
					if (pos < n) {
						memmove(buf + pos, buf + pos + 1, n - pos - 1);
						n--;
					}
					break;
				default:
					if (2 * n + 1 < sizeof(buf)) {
						buf[n] = ',';
						memcpy(buf + n + 1, buf, n);
						n = 2 * n + 1;
					}
				}
			}
		}
		/* embedded NULs are part of the test: the checker sees a C string */
		if (check_one(buf, n) == 0)
			valid++;
	}
	printf("fuzz: %ld inputs, %ld valid, no crash\n", count, valid);
	return 0;
}
#endif
