/* Strict parser of the scheduler daemon's per-job settings file: bounded, no allocation. */
#include "envfile.h"

#include <string.h>

static const char PREFIX[] = "EASLURM_";
#define PREFIX_LEN (sizeof(PREFIX) - 1)

static int name_char(char c) { return (c >= 'A' && c <= 'Z') || c == '_'; }

static int value_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
	       c == '_' || c == ':' || c == '-';
}

/* One line (no '\n'): copy name and value out when it matches, else return -1. */
static int parse_line(const char *line, size_t len, char *name, char *value)
{
	size_t i = PREFIX_LEN;
	if (len <= PREFIX_LEN || memcmp(line, PREFIX, PREFIX_LEN) != 0)
		return -1;
	while (i < len && name_char(line[i]))
		i++;
	size_t nlen = i - PREFIX_LEN;
	if (nlen < 1 || nlen > EAS_ENV_NAME_MAX - 1 - PREFIX_LEN || i >= len || line[i] != '=')
		return -1;
	size_t vstart = i + 1, vlen = len - vstart;
	if (vlen < 1 || vlen > EAS_ENV_VALUE_MAX - 1)
		return -1;
	for (size_t k = vstart; k < len; k++)
		if (!value_char(line[k]))
			return -1;
	memcpy(name, line, i);
	name[i] = '\0';
	memcpy(value, line + vstart, vlen);
	value[vlen] = '\0';
	return 0;
}

int eas_env_parse(const char *buf, size_t len, eas_env_cb cb, void *arg, int *rejected)
{
	char name[EAS_ENV_NAME_MAX], value[EAS_ENV_VALUE_MAX];
	int accepted = 0;
	size_t start = 0;
	*rejected = 0;
	while (start < len) {
		const char *nl = memchr(buf + start, '\n', len - start);
		size_t end = nl ? (size_t) (nl - buf) : len;
		if (end > start) {
			if (parse_line(buf + start, end - start, name, value) == 0) {
				cb(name, value, arg);
				accepted++;
			} else {
				(*rejected)++;
			}
		}
		start = end + 1;
	}
	return accepted;
}
