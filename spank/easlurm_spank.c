/*
 * easlurm SPANK plugin: `--energy-profile[=SPEC]` starts one easlurm node agent per job step on each
 * node and stops it when the step's tasks have ended. This file only parses, forks/execs, waits with
 * timeouts and logs; all logic (sensors, records, publication) is in Python (easlurm.accounting.agent).
 *
 * It also hands the scheduler daemon's choice for a job (batch size, GPU count, ...) to the job's tasks:
 * `<spool>/sched/job-<id>.env`, written by `easlurm schedd`, becomes EASLURM_* environment variables.
 *
 * plugstack.conf:  optional /path/easlurm_spank.so agent=/usr/bin/python3 spool=/var/spool/easlurm
 *                  timeout_ms=2000 [models=/path/easlurm-models.txt] [config=/etc/easlurm/config.yaml]
 *                  [env=NAME=VALUE ...]
 * models=: the oracle's model names (`easlurm model list --names`); a SPEC's model= typed at submission
 * must be one of them (the error names the nearest). Unreadable: logged, and the name is not checked.
 *
 * Safety: the plugin never fails a job once it was accepted. Only an invalid SPEC is rejected, at
 * submission (sbatch/salloc/srun). No shell is ever used; the user's SPEC reaches the agent as one argv
 * element after a strict syntax check and never becomes a path.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "envfile.h"
#include "spec.h"

SPANK_PLUGIN(easlurm, 1);

/* An easlurm problem the plugin handles (the job runs on, unprofiled or partly profiled). In slurmstepd
 * slurm_error() also lands in the user's job output, so there it goes to the slurmd log only
 * (slurm_info, tagged "error:"); the agent keeps its own copy in the spool log. Only an invalid SPEC at
 * submission is a user-visible error. */
#define site_error(fmt, ...)                                                                               \
	do {                                                                                                   \
		if (spank_context() == S_CTX_REMOTE)                                                               \
			slurm_info("error: " fmt, ##__VA_ARGS__);                                                      \
		else                                                                                               \
			slurm_error(fmt, ##__VA_ARGS__);                                                               \
	} while (0)

#define PATH_LEN 1024
#define MAX_ENV 16
#define ENV_LEN 1024
#define GPUS_LEN 512
#define DEFAULT_TIMEOUT_MS 2000L
#define LOG_TAIL 1024

static struct {
	char agent[PATH_LEN];  /* python interpreter that has easlurm installed */
	char spool[PATH_LEN];  /* where node records meet (shared between nodes) */
	char config[PATH_LEN]; /* optional easlurm config file for the agent */
	char models[PATH_LEN]; /* optional model names file: model= is checked at submission */
	long timeout_ms;       /* bound on the wait at step end */
	char env[MAX_ENV][ENV_LEN];
	int nenv;
} conf = {"/usr/bin/python3", "/var/spool/easlurm", "", "", DEFAULT_TIMEOUT_MS, {{0}}, 0};

static int opt_given;
static int opt_valid = 1;
static char opt_spec[EAS_SPEC_MAX + 1];

static pid_t agent_pgid = -1; /* the agent's session (double fork: it is not slurmstepd's child) */
static int stop_fd = -1;      /* our end of the agent's stdin: shutdown = stop */
static int log_fd = -1;       /* read end of the agent's stderr: EOF = the agent has exited */
static uint32_t tasks_exited;
static char step_label[64] = "?";

static double now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Where srun, salloc and sbatch inside a job find the option of the enclosing sbatch/salloc. Slurm replays
 * it through opt_cb before the command line's value, so a value equal to it is the inherited one. */
#define INHERITED_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_easlurm_energy_profile"
/* What Slurm 22.05's sbatch exports for a bare option (a NULL value printed with "%s"). */
#define NULL_TEXT "(null)"

/* The models= file's text (at most MODELS_MAX bytes) into buf; its length, or -1 (logged) when it cannot
 * be read: the name then goes unchecked (fail safe: the job is not refused for the site's mistake). */
#define MODELS_MAX 65536
static ssize_t read_models(char *buf, size_t size)
{
	struct stat st;
	size_t len = 0;
	int fd = open(conf.models, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size >= (off_t) size) {
		site_error("easlurm: models=%s is not a readable file under %zu bytes; model= not checked",
			   conf.models, size);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (len < size) {
		ssize_t got = read(fd, buf + len, size - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t) got;
	}
	close(fd);
	return (ssize_t) len;
}

/* A model= typed at submission against the models= file: 0 when known or unchecked, -1 with err. */
static int check_model(const char *spec, char *err, size_t errlen)
{
	static char names[MODELS_MAX];
	const char *model;
	size_t mlen;
	if (!conf.models[0] || !eas_spec_model(spec, &model, &mlen))
		return 0;
	ssize_t n = read_models(names, sizeof(names));
	if (n < 0)
		return 0;
	return eas_model_check(names, (size_t) n, model, mlen, err, errlen);
}

/* Option callback. Contexts: local (srun), allocator (sbatch/salloc), remote (slurmstepd).
 * A bare option is the default SPEC: it arrives as NULL in srun, "" on the compute side and "(null)"
 * from the job's environment (the batch step, and every srun or sbatch inside the job).
 * Fail safe: only a SPEC typed on this command's line is rejected (this is submission); a value
 * inherited from the job's environment or seen on the compute side was accepted at submission, so
 * when it does not parse (hand-edited environment, another plugin version) the step runs unprofiled. */
static int opt_cb(int val, const char *optarg, int remote)
{
	char err[512];
	const char *env = remote ? NULL : getenv(INHERITED_ENV);
	int inherited = remote || (env && optarg && strcmp(env, optarg) == 0);
	(void) val;
	opt_given = 1;
	if (!optarg || (inherited && strcmp(optarg, NULL_TEXT) == 0))
		optarg = "";
	if (eas_spec_check(optarg, err, sizeof(err)) < 0) {
		opt_valid = 0;
		if (!inherited) {
			slurm_error("easlurm: invalid --energy-profile: %s", err);
			return -1;
		}
		site_error("easlurm: not profiling, invalid inherited --energy-profile: %s", err);
		return 0;
	}
	if (!inherited && check_model(optarg, err, sizeof(err)) < 0) {
		opt_valid = 0;
		slurm_error("easlurm: invalid --energy-profile: %s", err);
		return -1;
	}
	opt_valid = 1;
	snprintf(opt_spec, sizeof(opt_spec), "%s", optarg);
	return 0;
}

static struct spank_option energy_opt = {
	"energy-profile", "SPEC",
	"Account the energy of every job step (easlurm; see `easlurm sacct`). SPEC is a comma list: "
	"devices all (default) or gpu, cpu, dram; interval=200ms; scheduler hints model=NAME, steps=N, "
	"batch=64:128, gpus=1:2:4, deadline=2h, urgent, share (may share its one GPU), nolimit (default GPU power limit). "
	"Model names: easlurm model list --names.",
	2, 0, opt_cb};

static int copy_arg(char *dst, size_t len, const char *value, const char *key)
{
	int n = snprintf(dst, len, "%s", value);
	if (n < 0 || (size_t) n >= len) {
		site_error("easlurm: plugstack argument %s= too long, ignored", key);
		dst[0] = '\0';
		return -1;
	}
	return 0;
}

static int env_name_ok(const char *s, const char *eq)
{
	if (eq == s)
		return 0;
	for (const char *p = s; p < eq; p++)
		if (!((*p >= 'A' && *p <= 'Z') || *p == '_' || (p > s && *p >= '0' && *p <= '9')))
			return 0;
	return 1;
}

/* plugstack.conf key=value arguments: admin input; unknown keys are reported and ignored. */
static void parse_args(int ac, char **av, int verbose)
{
	for (int i = 0; i < ac; i++) {
		const char *a = av[i];
		if (strncmp(a, "agent=", 6) == 0) {
			copy_arg(conf.agent, sizeof(conf.agent), a + 6, "agent");
		} else if (strncmp(a, "spool=", 6) == 0) {
			copy_arg(conf.spool, sizeof(conf.spool), a + 6, "spool");
		} else if (strncmp(a, "models=", 7) == 0) {
			copy_arg(conf.models, sizeof(conf.models), a + 7, "models");
		} else if (strncmp(a, "config=", 7) == 0) {
			copy_arg(conf.config, sizeof(conf.config), a + 7, "config");
		} else if (strncmp(a, "timeout_ms=", 11) == 0) {
			char *end = NULL;
			errno = 0;
			long v = strtol(a + 11, &end, 10);
			if (errno || end == a + 11 || *end != '\0' || v < 100 || v > 60000) {
				if (verbose)
					site_error("easlurm: timeout_ms must be 100..60000, keeping %ld",
						    conf.timeout_ms);
			} else {
				conf.timeout_ms = v;
			}
		} else if (strncmp(a, "env=", 4) == 0) {
			const char *kv = a + 4, *eq = strchr(kv, '=');
			if (!eq || !env_name_ok(kv, eq) || conf.nenv >= MAX_ENV) {
				if (verbose)
					site_error("easlurm: bad or too many env= arguments, ignored: %s", a);
			} else if (copy_arg(conf.env[conf.nenv], ENV_LEN, kv, "env") == 0) {
				conf.nenv++;
			}
		} else if (verbose) {
			site_error("easlurm: unknown plugstack argument '%s' ignored", a);
		}
	}
	if (verbose && conf.agent[0] != '/')
		site_error("easlurm: agent= should be an absolute path (got '%s')", conf.agent);
}

/* Contexts: all. Registers the option (the only way sbatch/salloc see it) and reads plugstack args. */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	if (ctx == S_CTX_SLURMD || ctx == S_CTX_JOB_SCRIPT || ctx == S_CTX_ERROR)
		return ESPANK_SUCCESS;
	parse_args(ac, av, ctx == S_CTX_REMOTE);
	if (spank_option_register(sp, &energy_opt) != ESPANK_SUCCESS)
		site_error("easlurm: cannot register --energy-profile");
	return ESPANK_SUCCESS;
}

static int gpus_ok(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || *s == ','))
			return 0;
	return 1;
}

/* The GPUs the step owns on this node, from the GRES environment, validated to digits and commas.
 * srun steps: SLURM_STEP_GPUS (set per node by slurmstepd); batch step: SLURM_JOB_GPUS. Other variables
 * (CUDA_VISIBLE_DEVICES, the job's list in an srun step) may be inherited from the submitting shell. */
static void step_gpus(spank_t sp, int batch, char *out, size_t len)
{
	const char *var = batch ? "SLURM_JOB_GPUS" : "SLURM_STEP_GPUS";
	if (spank_getenv(sp, var, out, (int) len) != ESPANK_SUCCESS || !gpus_ok(out))
		out[0] = '\0';
}

/* The step's node list (node names: virtual nodes share one hostname). At init_post_opt only the
 * list is reliable (SLURMD_NODENAME is still the submitting node's); the agent picks its entry by node
 * id. Characters are checked; the agent parses it strictly. */
static void step_nodelist(spank_t sp, int batch, char *out, size_t len)
{
	const char *var = batch ? "SLURM_JOB_NODELIST" : "SLURM_STEP_NODELIST";
	if (spank_getenv(sp, var, out, (int) len) != ESPANK_SUCCESS || !out[0]) {
		out[0] = '\0';
		return;
	}
	for (const char *p = out; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("._-,[]", *p))) {
			out[0] = '\0';
			return;
		}
}

/* The job's run: SLURM_RESTART_COUNT (how often it was requeued), so every run of a requeued job keeps
 * its own records. Empty when absent or not a number: srun steps inherit it from the batch script, but
 * the batch step's environment lacks it here; the agent then asks slurmctld (Restarts=). */
static void step_restart(spank_t sp, char *out, size_t len)
{
	char buf[32], *end = NULL;
	unsigned long v = 0;
	out[0] = '\0';
	if (spank_getenv(sp, "SLURM_RESTART_COUNT", buf, (int) sizeof(buf)) != ESPANK_SUCCESS || !buf[0] ||
	    buf[0] == '-')
		return;
	errno = 0;
	v = strtoul(buf, &end, 10);
	if (!errno && end && !*end && v <= 1000000UL)
		snprintf(out, len, "%lu", v);
}

/* The job's shards on this node (SLURM_SHARDS_ON_NODE, set only for gres/shard jobs): only a step on
 * shards can meet another job on its GPU, so only then does the agent watch who else runs there. */
static void step_shards(spank_t sp, char *out, size_t len)
{
	char buf[16];
	out[0] = '\0';
	if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", buf, (int) sizeof(buf)) != ESPANK_SUCCESS || !buf[0])
		return;
	for (const char *p = buf; *p; p++)
		if (*p < '0' || *p > '9')
			return;
	snprintf(out, len, "%s", buf);
}

static void close_from(int lowfd)
{
	long maxfd = sysconf(_SC_OPEN_MAX);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	for (int fd = lowfd; fd < maxfd; fd++)
		close(fd);
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Fork/exec the agent detached (double fork, own session) so slurmstepd's task reaping never sees it. */
static int agent_start(spank_t sp)
{
	uint32_t job = 0, step = 0, nnodes = 0, nodeid = 0;
	uid_t uid = 0;
	gid_t gid = 0;
	char gpus[GPUS_LEN], nodes[4096];
	char a_job[16], a_step[16], a_nnodes[16], a_node[16], a_uid[16], a_gid[16], a_pid[16], a_tmo[16];
	char a_restart[16], a_shards[16], a_t0[32], execfail[PATH_LEN + 64], a_spec[EAS_SPEC_MAX + 8];
	const char *argv[40];
	char *envp[MAX_ENV + 8];
	char env_conf[PATH_LEN + 16];
	int in_sv[2] = {-1, -1}, err_p[2] = {-1, -1}, pid_p[2] = {-1, -1};
	int n = 0, ne = 0;

	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_NNODES, &nnodes) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_NODEID, &nodeid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
		site_error("easlurm: cannot read job items, not profiling this step");
		return -1;
	}
	if (step == SLURM_EXTERN_CONT || step == SLURM_INTERACTIVE_STEP || step == SLURM_PENDING_STEP)
		return 0;
	if (step == SLURM_BATCH_SCRIPT)
		snprintf(step_label, sizeof(step_label), "%u.batch", job);
	else
		snprintf(step_label, sizeof(step_label), "%u.%u", job, step);
	if (access(conf.agent, X_OK) != 0) {
		site_error("easlurm: step %s not profiled: agent %s not executable (%s)", step_label, conf.agent,
			    strerror(errno));
		return -1;
	}
	step_gpus(sp, step == SLURM_BATCH_SCRIPT, gpus, sizeof(gpus));
	step_nodelist(sp, step == SLURM_BATCH_SCRIPT, nodes, sizeof(nodes));
	snprintf(a_job, sizeof(a_job), "%u", job);
	step_restart(sp, a_restart, sizeof(a_restart));
	step_shards(sp, a_shards, sizeof(a_shards));
	if (step == SLURM_BATCH_SCRIPT)
		snprintf(a_step, sizeof(a_step), "batch");
	else
		snprintf(a_step, sizeof(a_step), "%u", step);
	snprintf(a_nnodes, sizeof(a_nnodes), "%u", nnodes);
	snprintf(a_node, sizeof(a_node), "%u", nodeid);
	snprintf(a_uid, sizeof(a_uid), "%u", (unsigned) uid);
	snprintf(a_gid, sizeof(a_gid), "%u", (unsigned) gid);
	snprintf(a_pid, sizeof(a_pid), "%d", (int) getpid());
	snprintf(a_tmo, sizeof(a_tmo), "%ld", conf.timeout_ms);
	snprintf(a_t0, sizeof(a_t0), "%.6f", now_s(CLOCK_REALTIME));
	snprintf(a_spec, sizeof(a_spec), "--spec=%s", opt_spec);
	snprintf(execfail, sizeof(execfail), "easlurm-agent: cannot execute %s\n", conf.agent);

	argv[n++] = conf.agent;
	argv[n++] = "-m";
	argv[n++] = "easlurm.accounting.agent";
	argv[n++] = "--job";
	argv[n++] = a_job;
	argv[n++] = "--step";
	argv[n++] = a_step;
	if (a_restart[0]) {
		argv[n++] = "--restart";
		argv[n++] = a_restart;
	}
	argv[n++] = "--nnodes";
	argv[n++] = a_nnodes;
	argv[n++] = "--node-id";
	argv[n++] = a_node;
	argv[n++] = "--uid";
	argv[n++] = a_uid;
	argv[n++] = "--gid";
	argv[n++] = a_gid;
	argv[n++] = "--stepd-pid";
	argv[n++] = a_pid;
	argv[n++] = "--spool";
	argv[n++] = conf.spool;
	argv[n++] = "--timeout-ms";
	argv[n++] = a_tmo;
	argv[n++] = "--step-start";
	argv[n++] = a_t0;
	argv[n++] = a_spec; /* one argv element, syntax-checked; never seen by a shell */
	if (gpus[0]) {
		argv[n++] = "--gpus";
		argv[n++] = gpus;
	}
	if (nodes[0]) {
		argv[n++] = "--nodelist";
		argv[n++] = nodes;
	}
	if (a_shards[0]) {
		argv[n++] = "--shards";
		argv[n++] = a_shards;
	}
	argv[n] = NULL;

	envp[ne++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	envp[ne++] = "LANG=C.UTF-8";
	envp[ne++] = "HOME=/";
	envp[ne++] = "PYTHONDONTWRITEBYTECODE=1";
	static char env_slurm_conf[PATH_LEN + 16];
	const char *sc = getenv("SLURM_CONF");
	if (sc && snprintf(env_slurm_conf, sizeof(env_slurm_conf), "SLURM_CONF=%s", sc) <
		      (int) sizeof(env_slurm_conf))
		envp[ne++] = env_slurm_conf;
	if (conf.config[0] && snprintf(env_conf, sizeof(env_conf), "EASLURM_AGENT_CONFIG=%s", conf.config) <
				      (int) sizeof(env_conf))
		envp[ne++] = env_conf;
	for (int i = 0; i < conf.nenv; i++)
		envp[ne++] = conf.env[i];
	envp[ne] = NULL;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_sv) < 0 || pipe2(err_p, O_CLOEXEC) < 0 ||
	    pipe2(pid_p, O_CLOEXEC) < 0) {
		site_error("easlurm: step %s not profiled: pipe: %s", step_label, strerror(errno));
		goto fail;
	}
	pid_t child = fork();
	if (child < 0) {
		site_error("easlurm: step %s not profiled: fork: %s", step_label, strerror(errno));
		goto fail;
	}
	if (child == 0) {
		/* Only async-signal-safe calls from here on. */
		setsid();
		pid_t grandchild = fork();
		if (grandchild != 0) {
			if (grandchild > 0 && write(pid_p[1], &grandchild, sizeof(grandchild)) < 0)
				_exit(1);
			_exit(grandchild > 0 ? 0 : 1);
		}
		int devnull = open("/dev/null", O_RDWR);
		if (dup2(in_sv[1], 0) < 0 || dup2(devnull, 1) < 0 || dup2(err_p[1], 2) < 0)
			_exit(126);
		close_from(3);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		for (int s = 1; s < 32; s++)
			signal(s, SIG_DFL);
		umask(022);
		if (chdir("/") < 0)
			_exit(126);
		execve(conf.agent, (char *const *) argv, envp);
		if (write(2, execfail, strlen(execfail)) < 0)
			_exit(127);
		_exit(127);
	}
	close(in_sv[1]);
	close(err_p[1]);
	close(pid_p[1]);
	in_sv[1] = err_p[1] = pid_p[1] = -1;
	pid_t grandchild = -1;
	if (read(pid_p[0], &grandchild, sizeof(grandchild)) != (ssize_t) sizeof(grandchild))
		grandchild = -1;
	close(pid_p[0]);
	pid_p[0] = -1;
	while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
		;
	if (grandchild <= 0) {
		site_error("easlurm: step %s not profiled: agent fork failed", step_label);
		goto fail;
	}
	agent_pgid = child; /* setsid() in the child: its pid is the agent's process group */
	stop_fd = in_sv[0];
	log_fd = err_p[0];
	set_nonblock(log_fd);
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (in_sv[i] >= 0)
			close(in_sv[i]);
		if (err_p[i] >= 0)
			close(err_p[i]);
		if (pid_p[i] >= 0)
			close(pid_p[i]);
	}
	return -1;
}

/* Log each line the agent wrote on stderr (it writes only warnings and errors). */
static void log_tail(char *buf, size_t len)
{
	char *line = buf;
	buf[len] = '\0';
	for (char *p = buf; p <= buf + len; p++) {
		if (*p == '\n' || *p == '\0') {
			char c = *p;
			*p = '\0';
			if (*line)
				site_error("easlurm: step %s agent: %s", step_label, line);
			if (c == '\0')
				break;
			line = p + 1;
		}
	}
}

/* Tell the agent the step ended, then wait (bounded) until it exits. Past the bound the step goes on
 * without it: the agent is left to finish in the background (it writes its record and publishes late,
 * and ends itself within spank.late_limit_s). Killing it would lose the record of an overloaded node. */
static void agent_stop(void)
{
	char line[64], tail[LOG_TAIL + 1];
	size_t tlen = 0;
	double t0 = now_s(CLOCK_MONOTONIC);
	double deadline = t0 + conf.timeout_ms / 1000.0;
	int done = 0;

	if (stop_fd < 0)
		return;
	int n = snprintf(line, sizeof(line), "stop %.6f\n", now_s(CLOCK_REALTIME));
	if (n > 0 && send(stop_fd, line, (size_t) n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		slurm_info("easlurm: step %s: agent already gone (%s)", step_label, strerror(errno));
	shutdown(stop_fd, SHUT_WR);
	close(stop_fd);
	stop_fd = -1;
	while (!done) {
		double left = deadline - now_s(CLOCK_MONOTONIC);
		if (left <= 0)
			break;
		struct pollfd pfd = {log_fd, POLLIN, 0};
		int r = poll(&pfd, 1, (int) (left * 1000.0) + 1);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		char buf[512];
		ssize_t got = read(log_fd, buf, sizeof(buf));
		if (got == 0) {
			done = 1;
		} else if (got > 0) {
			for (ssize_t i = 0; i < got; i++) {
				if (tlen == LOG_TAIL) {
					memmove(tail, tail + LOG_TAIL / 2, LOG_TAIL / 2);
					tlen = LOG_TAIL / 2;
				}
				tail[tlen++] = buf[i];
			}
		} else if (errno != EAGAIN && errno != EINTR) {
			break;
		}
	}
	close(log_fd); /* the agent's later messages are dropped; its record is not */
	log_fd = -1;
	if (tlen)
		log_tail(tail, tlen);
	double took_ms = (now_s(CLOCK_MONOTONIC) - t0) * 1000.0;
	if (done)
		slurm_info("easlurm: step %s: agent stopped in %.1f ms", step_label, took_ms);
	else
		slurm_info("easlurm: step %s: agent still running after %ld ms; left to finish in the background",
			   step_label, conf.timeout_ms);
	agent_pgid = -1;
}

/* Context: remote (slurmstepd, root, once per step and node, before tasks start). */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE || !opt_given || !opt_valid || agent_pgid > 0)
		return ESPANK_SUCCESS;
	double t0 = now_s(CLOCK_MONOTONIC);
	if (agent_start(sp) == 0 && agent_pgid > 0)
		slurm_info("easlurm: step %s: agent started in %.1f ms", step_label,
			   (now_s(CLOCK_MONOTONIC) - t0) * 1000.0);
	return ESPANK_SUCCESS;
}

struct env_apply {
	spank_t sp;
	int set;
	int failed;
};

static void env_apply_one(const char *name, const char *value, void *arg)
{
	struct env_apply *a = arg;
	if (spank_setenv(a->sp, name, value, 1) == ESPANK_SUCCESS)
		a->set++;
	else
		a->failed++;
}

/* A root-owned node that nobody else can write (the settings come from the daemon, never a user). */
static int root_only(const struct stat *st)
{
	return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* The scheduler daemon's settings for this job: `<spool>/sched/job-<id>.env`, at most
 * EAS_ENV_FILE_MAX bytes, a regular root-owned file (no symlink, no hard link) in a root-owned
 * directory, neither writable by group or others. Only strict EASLURM_* lines are set. A missing file is
 * the normal case (no daemon decision); a bad one is logged and ignored: the job runs as submitted. */
static void sched_env(spank_t sp, uint32_t job)
{
	char dir[PATH_LEN + 8], name[32], buf[EAS_ENV_FILE_MAX + 1];
	struct stat st;
	size_t len = 0;
	int n = snprintf(dir, sizeof(dir), "%s/sched", conf.spool);
	if (n < 0 || (size_t) n >= sizeof(dir))
		return;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		if (errno != ENOENT)
			site_error("easlurm: job %u: scheduler settings ignored: %s: %s", job, dir, strerror(errno));
		return;
	}
	if (fstat(dfd, &st) < 0 || !root_only(&st)) {
		site_error("easlurm: job %u: scheduler settings ignored: %s not root-owned or writable by others",
			    job, dir);
		close(dfd);
		return;
	}
	snprintf(name, sizeof(name), "job-%u.env", job);
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int open_errno = errno;
	close(dfd);
	if (fd < 0) {
		if (open_errno != ENOENT)
			site_error("easlurm: job %u: scheduler settings ignored: %s/%s: %s", job, dir, name,
				    strerror(open_errno));
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || !root_only(&st) ||
	    st.st_size > EAS_ENV_FILE_MAX) {
		site_error("easlurm: job %u: scheduler settings ignored: %s/%s is not a regular root-owned file "
			    "of at most %d bytes, unwritable by others",
			    job, dir, name, EAS_ENV_FILE_MAX);
		close(fd);
		return;
	}
	while (len < sizeof(buf)) {
		ssize_t got = read(fd, buf + len, sizeof(buf) - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			site_error("easlurm: job %u: scheduler settings ignored: read: %s", job, strerror(errno));
			close(fd);
			return;
		}
		if (got == 0)
			break;
		len += (size_t) got;
	}
	close(fd);
	if (len > EAS_ENV_FILE_MAX) {
		site_error("easlurm: job %u: scheduler settings ignored: %s/%s over %d bytes", job, dir, name,
			    EAS_ENV_FILE_MAX);
		return;
	}
	struct env_apply a = {sp, 0, 0};
	int rejected = 0;
	eas_env_parse(buf, len, env_apply_one, &a, &rejected);
	if (rejected)
		site_error("easlurm: job %u: %d malformed line(s) in %s/%s ignored", job, rejected, dir, name);
	if (a.failed)
		site_error("easlurm: job %u: %d scheduler setting(s) could not be set", job, a.failed);
	if (a.set)
		slurm_info("easlurm: job %u: %d scheduler setting(s) from %s/%s", job, a.set, dir, name);
}

/* Context: remote (slurmstepd, once per step and node, with the job user's privileges, before the
 * tasks start; what spank_setenv sets here reaches the tasks). Any job: the daemon also schedules jobs
 * declared through their Comment, without the option. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	uint32_t job = 0, step = 0;
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE)
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return ESPANK_SUCCESS;
	if (step == SLURM_EXTERN_CONT || step == SLURM_PENDING_STEP)
		return ESPANK_SUCCESS;
	sched_env(sp, job);
	return ESPANK_SUCCESS;
}

/* Context: remote (slurmstepd, once per task as its exit is collected). The last local task stops
 * the agent: this is the hook whose work srun and the batch script wait for. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	uint32_t ntasks = 0;
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE || agent_pgid <= 0)
		return ESPANK_SUCCESS;
	tasks_exited++;
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS || tasks_exited >= ntasks)
		agent_stop();
	return ESPANK_SUCCESS;
}

/* Context: all; in slurmstepd it catches steps whose tasks never ran (the record may then be late). */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() == S_CTX_REMOTE && agent_pgid > 0)
		agent_stop();
	return ESPANK_SUCCESS;
}
