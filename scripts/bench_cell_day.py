"""Benchmark: one cell-day of the Google trace (configs/cell_day.textproto) end to end.

    python scripts/bench_cell_day.py [--machines 12000] [--data_dir DIR] [--out_dir DIR]
        [--format parquet|json] [--workers 2] [--skip_stages] [--skip_whole]
        [--dask] [--dask_memory_limit 10GB] [--dask_npartitions N] [--ingest_and_overcommit]
        [--engine flink|spark [--environment external|loopback] [--parallelism N]]
        [--reference DIR]

Generates the synthetic cell-day (`fleetcast synth`) into --data_dir, or reuses one of the
same arguments, then times under `/usr/bin/time -v` the whole config in one run, and the
config cut into stages run one after the other ("tables", "overcommit",
"lifetime+placement", each reading the previous one's tables), on the DirectRunner with
--workers processes, with --dask on a local Dask cluster started here, or with --engine on
the Flink or Spark cluster of scripts/engines.sh (EXTERNAL: a `fleetcast worker-pool` started
here, --parallelism task slots and Python workers; the cluster's processes count in the CPU
and memory figures, and a line per process says what each used). --reference compares the
whole run's tables with an earlier run's results directory (scripts/compare_results.py).
--ingest_and_overcommit drops the lifetime and placement stages. What each figure counts
(wall, CPU, peak RSS, peak anonymous memory) is on docs/performance.md; the last line reads
`cell_day: windows=N wall_s=S cpu_s=C peak_rss_gb=G windows_per_s=R`.
"""

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from google.protobuf import text_format

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from configs import fleetcast_pb2  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "cell_day.textproto")
FLEETCAST = os.path.join(os.path.dirname(sys.executable), "fleetcast")
DASK = os.path.join(os.path.dirname(sys.executable), "dask")
# About 16 instances running per machine (the default trace has ~6): smaller requests.
REQUEST_SCALE = 0.35
SUFFIXES = {"parquet": ".parquet", "json": ".json.gz"}
# /usr/bin/time -v's lines read here, and the keys they are stored under.
TIME_FIELDS = {"User time (seconds)": "user_s", "System time (seconds)": "system_s",
               "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall",
               "Maximum resident set size (kbytes)": "rss_kb"}


def synth_arguments(args) -> list:
    return ["--machines", str(args.machines), "--days", "1", "--request_scale",
            str(REQUEST_SCALE), "--format", args.format, "--layout", "public", "--shards",
            str(args.shards), "--seed", "0"]


def ensure_trace(args) -> dict:
    """The trace's row counts, generating it unless --data_dir holds one of the same
    arguments; prints the generation's costs."""
    marker = os.path.join(args.data_dir, "bench_cell_day.json")
    wanted = synth_arguments(args)
    if os.path.exists(marker):
        with open(marker) as f:
            known = json.load(f)
        if known["arguments"] == wanted:
            print(f"reusing the trace in {args.data_dir}")
            return known["rows"]
    measured, output = timed([FLEETCAST, "synth", "--out", args.data_dir, *wanted,
                              "--processes", str(args.workers)])
    rows = {table: int(n.replace(",", ""))
            for table, n in re.findall(r"^\s+(\w+)\s+([\d,]+) rows$", output, re.M)}
    rate = rows["instance_usage"] / measured["wall_s"]
    print(line("synth", measured) + f" windows_per_s={rate:.0f}")
    with open(marker, "w") as f:
        json.dump({"arguments": wanted, "rows": rows}, f)
    return rows


def process_trees(*root_pids: int) -> list:
    """For each of `root_pids`, the set of it and its descendants (one read of Linux's
    /proc)."""
    children = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    trees = []
    for root in root_pids:
        found, pids = set(), [root]
        while pids:
            pid = pids.pop()
            found.add(pid)
            pids += children.get(pid, [])
        trees.append(found)
    return trees


def sample(pid: int) -> tuple:
    """(anonymous resident memory (RssAnon, kB), CPU seconds so far) of process `pid`, or
    None once it is gone. RssAnon is the memory a process needs, without the file pages it
    maps (the spill files it reads), which the kernel can drop and read again."""
    try:
        with open(f"/proc/{pid}/status") as f:
            anon_kb = int(next(line for line in f if line.startswith("RssAnon:")).split()[1])
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except (OSError, StopIteration):
        return None
    return anon_kb, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(command: list, cwd: str = REPO, cluster_pids=()) -> tuple:
    """({wall_s, cpu_s, rss_gb, anon_gb, processes}, stdout) of `command` under
    /usr/bin/time -v; rss_gb is the largest process's peak resident set, anon_gb the largest
    peak anonymous memory of one process, sampled every second (`sample`), of the command's
    processes and those of `cluster_pids` (and their descendants), whose CPU seconds from the
    command's start cpu_s includes; processes maps each sampled pid to (what it runs, its CPU
    seconds over the command, peak anonymous GB). A failure exits with its stderr's last
    lines."""
    # A cluster's daemons ran before: their CPU seconds count from here.
    cpu_before = {pid: sampled[1] for pid in set().union(*process_trees(*cluster_pids))
                  if (sampled := sample(pid)) is not None}
    process = subprocess.Popen(["/usr/bin/time", "-v", *command], cwd=cwd, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_anon_kb, cpu_s, names, cluster = {}, {}, {}, set()
    while True:
        try:
            stdout, stderr = process.communicate(timeout=1)
            break
        except subprocess.TimeoutExpired:
            command_tree, *cluster_trees = process_trees(process.pid, *cluster_pids)
            cluster |= set().union(*cluster_trees)  # and those that have ended
            for pid in command_tree | cluster:
                sampled = sample(pid)
                if sampled is not None:
                    peak_anon_kb[pid] = max(sampled[0], peak_anon_kb.get(pid, 0))
                    cpu_s[pid] = sampled[1] - cpu_before.get(pid, 0.0)
                    names.setdefault(pid, process_name(pid))
    if process.returncode != 0:
        sys.exit(f"bench_cell_day: {' '.join(command[:3])} failed:\n"
                 + "\n".join(stderr.splitlines()[-30:]))
    values = {}
    for text in stderr.splitlines():
        name, _, value = text.strip().rpartition(": ")
        if name in TIME_FIELDS:
            values[TIME_FIELDS[name]] = value
    clock = [float(part) for part in values["wall"].split(":")]
    wall_s = sum(part * 60 ** i for i, part in enumerate(reversed(clock)))
    return {"wall_s": wall_s, "cpu_s": float(values["user_s"]) + float(values["system_s"])
            + sum(cpu_s[pid] for pid in cluster if pid in cpu_s),
            "rss_gb": int(values["rss_kb"]) / 2 ** 20,
            "anon_gb": max(peak_anon_kb.values(), default=0) / 2 ** 20,
            "processes": {pid: (names[pid], cpu_s[pid], peak_anon_kb[pid] / 2 ** 20)
                          for pid in cpu_s}}, stdout


def process_name(pid: int) -> str:
    """What process `pid` runs, in a few words (its command line's telling part)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    text = " ".join(argv)
    if argv and argv[0].endswith("java") and "job-server" in text:
        return "Beam job server"
    for marker, name in (("TaskManagerRunner", "Flink TaskManager"),
                         ("StandaloneSessionClusterEntrypoint", "Flink JobManager"),
                         ("deploy.worker.Worker", "Spark Worker"),
                         ("deploy.master.Master", "Spark Master"),
                         ("CoarseGrainedExecutorBackend", "Spark executor"),
                         ("pipelines.worker_pool", "Python worker"),
                         ("worker-pool", "worker pool"), ("sdk_worker_main", "Python worker"),
                         ("fleetcast run", "fleetcast run (submitter)"),
                         ("/usr/bin/time", "time")):
        if marker in text:
            return name
    return os.path.basename(argv[0]) if argv else "?"


@contextlib.contextmanager
def dask_cluster(workers: int, memory_limit: str, directory: str):
    """A local Dask cluster of `workers` one-thread worker processes: yields (scheduler
    address, the pids of the scheduler and of the workers' nanny)."""
    import distributed

    with open(os.path.join(directory, "dask_cluster.log"), "w") as log:
        scheduler = subprocess.Popen([DASK, "scheduler", "--port", "0", "--dashboard-address",
                                      ":0", "--scheduler-file",
                                      os.path.join(directory, "scheduler.json")],
                                     stdout=log, stderr=log)
        nanny = None
        try:
            for _ in range(600):
                if os.path.exists(os.path.join(directory, "scheduler.json")):
                    break
                time.sleep(0.1)
            with open(os.path.join(directory, "scheduler.json")) as f:
                address = json.load(f)["address"]
            nanny = subprocess.Popen([DASK, "worker", address, "--nworkers", str(workers),
                                      "--nthreads", "1", "--memory-limit", memory_limit,
                                      "--local-directory", directory],
                                     stdout=log, stderr=log)
            with distributed.Client(address) as client:
                client.wait_for_workers(workers, timeout=120)
            yield address, (scheduler.pid, nanny.pid)
        finally:
            for process in (nanny, scheduler):
                if process is not None:
                    process.terminate()
                    process.wait()


def line(what: str, measured: dict) -> str:
    return (f"{what}: wall_s={measured['wall_s']:.1f} cpu_s={measured['cpu_s']:.1f} "
            f"peak_rss_gb={measured['rss_gb']:.2f} peak_anon_gb={measured['anon_gb']:.2f}")


def cell_config(args) -> fleetcast_pb2.RunConfig:
    """configs/cell_day.textproto reading the trace in --data_dir."""
    config = text_format.Parse(open(CONFIG).read(), fleetcast_pb2.RunConfig())
    for table in ("instance_events", "instance_usage", "collection_events", "machine_events"):
        getattr(config.google_v3, table).path = os.path.join(
            os.path.abspath(args.data_dir), f"{table}-*{SUFFIXES[args.format]}")
    return config


def stage_configs(config: fleetcast_pb2.RunConfig, out_dir: str) -> dict:
    """{stage: config} of the stage runs, each loading the tables of the "tables" run."""
    tables_dir = os.path.join(out_dir, "cell_day_tables")
    stages = {"tables": fleetcast_pb2.RunConfig(), "overcommit": fleetcast_pb2.RunConfig(),
              "lifetime+placement": fleetcast_pb2.RunConfig()}
    stages["tables"].CopyFrom(config)
    for field in ("overcommit", "lifetime_model", "placement"):
        stages["tables"].ClearField(field)
    stages["overcommit"].overcommit.CopyFrom(config.overcommit)
    stages["overcommit"].usage.input.parquet = os.path.join(tables_dir, "usage")
    stages["overcommit"].machines.input.parquet = os.path.join(tables_dir, "machines")
    placement = stages["lifetime+placement"]
    placement.lifetime_model.CopyFrom(config.lifetime_model)
    placement.placement.CopyFrom(config.placement)
    placement.instances.input.parquet = os.path.join(tables_dir, "instances")
    placement.machines.input.parquet = os.path.join(tables_dir, "machines")
    for name, stage in stages.items():
        stage.name = "cell_day_" + re.sub(r"\W", "_", name)
        stage.output.CopyFrom(config.output)
    return stages


def run(config: fleetcast_pb2.RunConfig, out_dir: str, args) -> dict:
    """The costs of `fleetcast run` on `config`, on the DirectRunner with --workers worker
    processes, or with --dask on a new local Dask cluster of as many."""
    path = os.path.join(out_dir, f"{config.name}.textproto")
    with open(path, "w") as f:
        f.write(text_format.MessageToString(config))
    command = [FLEETCAST, "run", path, "--output_dir", os.path.join(out_dir, config.name), "-q"]
    if args.engine:
        return run_on_engine(command, out_dir, args)
    if not args.dask:
        measured, _ = timed(command + [f"--direct_num_workers={args.workers}",
                                       "--direct_running_mode=multi_processing"])
        return measured
    cluster_dir = tempfile.mkdtemp(prefix="dask_", dir=out_dir)
    with dask_cluster(args.workers, args.dask_memory_limit, cluster_dir) as (address, pids):
        measured, _ = timed(command + [
            "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={address}",
            f"--dask_npartitions={args.dask_npartitions or args.shards}"],
            cluster_pids=pids)
    return measured


def run_on_engine(command: list, out_dir: str, args) -> dict:
    """The costs of `command` on the --engine cluster of scripts/engines.sh, its processes'
    CPU and memory included (the cluster's daemons, and a worker pool for EXTERNAL)."""
    from fleetcast_testing import engines
    why = engines.why_not_up(args.engine)
    if why:
        sys.exit(f"bench_cell_day: {why}")
    run_dir = engines.engines_dir() / "run"
    daemons = [int(open(path).read().split()[-1]) for path in run_dir.glob("*.pid")
               if args.engine in path.name]
    parallelism = [f"--parallelism={args.parallelism}",
                   f"--sdk_worker_parallelism={args.parallelism}"]
    pool_dir = tempfile.mkdtemp(prefix="pool_", dir=out_dir)
    pool = (engines.worker_pool(pool_dir, log_path=os.path.join(pool_dir, "pool.log"))
            if args.environment == "external" else contextlib.nullcontext())
    with pool as port:
        options = engines.run_options(args.engine, args.environment, port)
        measured, _ = timed(command + options + parallelism,
                            cluster_pids=daemons + pool_pids(port))
    for name, cpu_s, anon_gb in sorted(measured["processes"].values(), key=lambda p: -p[1]):
        if cpu_s >= 1:
            print(f"  process {name}: cpu_s={cpu_s:.1f} peak_anon_gb={anon_gb:.2f}")
    return measured


def pool_pids(port) -> list:
    """The pid of the worker pool listening on `port` (none for LOOPBACK)."""
    if port is None:
        return []
    found = subprocess.run(["pgrep", "-f", f"worker-pool --port {port}"], capture_output=True,
                           text=True, check=False).stdout.split()
    return [int(pid) for pid in found]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=12_000)
    parser.add_argument("--data_dir", help="the trace's directory (default: "
                        "data/cell_day_MACHINES_FORMAT under the repository)")
    parser.add_argument("--out_dir", help="the runs' results (default: a new temporary "
                        "directory)")
    parser.add_argument("--format", choices=sorted(SUFFIXES), default="parquet")
    parser.add_argument("--shards", type=int, default=64, help="files per table")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes of the DirectRunner or Dask (and of synth)")
    parser.add_argument("--dask", action="store_true", help="run on a local Dask cluster")
    parser.add_argument("--dask_memory_limit", default="10GB",
                        help="each Dask worker's memory limit")
    parser.add_argument("--dask_npartitions", type=int,
                        help="Dask partitions (default: --shards, a partition per file)")
    parser.add_argument("--ingest_and_overcommit", action="store_true",
                        help="without the lifetime and placement stages")
    parser.add_argument("--engine", choices=("flink", "spark"),
                        help="run on the cluster of scripts/engines.sh")
    parser.add_argument("--environment", choices=("external", "loopback"), default="external",
                        help="the engine's Python workers")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="the engine's task slots used and Python workers")
    parser.add_argument("--reference", help="a results directory the whole run must equal")
    parser.add_argument("--skip_whole", action="store_true", help="only the stage runs")
    parser.add_argument("--skip_stages", action="store_true", help="only the whole run")
    args = parser.parse_args()
    args.data_dir = args.data_dir or os.path.join(
        REPO, "data", f"cell_day_{args.machines}_{args.format}")
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="bench_cell_day_")
    os.makedirs(out_dir, exist_ok=True)

    windows = ensure_trace(args)["instance_usage"]
    config = cell_config(args)
    if args.ingest_and_overcommit:
        config.ClearField("lifetime_model")
        config.ClearField("placement")
    total = None
    if not args.skip_whole:
        total = run(config, out_dir, args)
        print(line("whole run", total))
        if args.reference:
            compared = subprocess.run([sys.executable, os.path.join(REPO, "scripts",
                                                                    "compare_results.py"),
                                       args.reference, os.path.join(out_dir, config.name)],
                                      capture_output=True, text=True, check=False)
            print("tables " + ("identical to " if compared.returncode == 0 else
                               "DIFFER from ") + args.reference)
    if not args.skip_stages:
        stages = {name: run(stage, out_dir, args)
                  for name, stage in stage_configs(config, out_dir).items()}
        for name, measured in stages.items():
            print(line(f"stage {name}", measured))
        if total is None:
            total = {"wall_s": sum(m["wall_s"] for m in stages.values()),
                     "cpu_s": sum(m["cpu_s"] for m in stages.values()),
                     "rss_gb": max(m["rss_gb"] for m in stages.values()),
                     "anon_gb": max(m["anon_gb"] for m in stages.values())}
    if total is None:
        sys.exit("bench_cell_day: nothing to run (--skip_whole and --skip_stages)")
    print(f"cell_day: windows={windows} wall_s={total['wall_s']:.1f} "
          f"cpu_s={total['cpu_s']:.1f} peak_rss_gb={total['rss_gb']:.2f} "
          f"windows_per_s={windows / total['wall_s']:.0f}")


if __name__ == "__main__":
    main()
