"""Azure sources: the real V1 samples load; sizes scale usage; bad rows become dead letters."""

import sqlite3

import numpy as np
import pandas as pd
import pytest

from tests.helpers import run_text_config, write_gz_lines


@pytest.mark.real_data
@pytest.mark.slow
def test_real_azure_v1_samples_load(tmp_path, azure_vmtable, azure_readings):
    tables = run_text_config(
        f'azure_v1 {{ vmtable: "{azure_vmtable}" vm_cpu_readings: "{azure_readings}" }}',
        tmp_path)
    instances, usage = tables["instances"], tables["usage"]
    # data/README.md: 259,159 VMs, 5.5 % censored; 50 VMs × 8004 readings.
    assert len(instances) == 259_159 and tables["dead_letters"].empty
    assert instances.end_time.isna().mean() == pytest.approx(0.055, abs=0.002)
    lifetime_h = (instances.end_time - instances.start_time).dropna() / 3.6e9
    assert (lifetime_h < 1).sum() / len(instances) == pytest.approx(0.68, abs=0.005)
    assert set(instances.end_type.dropna()) == {"DELETED"}
    assert (instances.deployment_size >= 1).all()
    deployments = instances.groupby("deployment_id").size()
    assert (instances.set_index("deployment_id").deployment_size.groupby(level=0).first()
            == deployments).all()
    assert len(usage) == 50 * 8004 and usage.instance_id.nunique() == 50
    # The readings' VMs are not in the vmtable sample: each counts as 1 core (data/README.md).
    assert (usage.cpu_limit == 1).all()
    assert (usage.end_time - usage.start_time == 300_000_000).all()
    assert usage.avg_cpu.between(0, 1).all()


def test_vm_sizes_scale_readings_and_bad_rows_are_dead_letters(tmp_path):
    vmtable = tmp_path / "vmtable.csv.gz"
    readings = tmp_path / "readings.csv.gz"
    write_gz_lines(vmtable, [
        "vmA,s1,d1,100,4000,,,,Interactive,4,8",
        "vmB,s1,d1,200,,,,,Delay-insensitive,>24,>64",  # V2 buckets, censored
        "vmC,s2,d2,300,7300.5,,,,,2,3.5",
        "vmD,s2,d2,500,400,,,,,2,4",     # deleted before created
        "vmE,s2,d2,x,700,,,,,2,4",       # bad time
        "vmF,s2,d2,100,700,,,,,0,4",     # zero cores
        "vmG,s2,d2,100,700",             # wrong field count
    ])
    write_gz_lines(readings, [
        "0,vmA,,50,25", "300,vmA,,100,80", "0,vmZ,,10,5",
        "0,vmA,,,150",   # above 100 %
        "0,vmA,,,nan",   # NaN usage
        ",vmA,,1,1",     # missing timestamp
    ])
    tables = run_text_config(
        f'azure_v1 {{ vmtable: "{vmtable}" vm_cpu_readings: "{readings}" '
        f'default_core_count: 2 }}', tmp_path / "out")
    instances = tables["instances"].set_index("instance_id").sort_index()
    assert instances.index.tolist() == ["vmA", "vmB", "vmC"]
    assert instances.cpu_request.tolist() == [4, 24, 2]
    assert instances.memory_request.tolist() == [8, 64, 3.5]
    assert instances.deployment_size.tolist() == [2, 2, 1]
    assert instances.start_time.tolist() == [100_000_000, 200_000_000, 300_000_000]
    assert instances.end_time.iloc[2] == 7_300_500_000 and pd.isna(instances.end_time.iloc[1])
    usage = tables["usage"].sort_values(["instance_id", "start_time"])
    assert usage[["instance_id", "cpu_limit", "avg_cpu", "max_cpu"]].values.tolist() == [
        ["vmA", 4.0, 1.0, 2.0], ["vmA", 4.0, 3.2, 4.0], ["vmZ", 2.0, 0.1, 0.2]]
    counts = tables["source_counts"].set_index("table")
    assert counts.loc["vmtable", ["read", "kept", "rejected"]].tolist() == [7, 3, 4]
    assert counts.loc["vm_cpu_readings", ["read", "kept", "rejected"]].tolist() == [6, 3, 3]
    reasons = sorted(tables["dead_letters"].reason)
    assert reasons == sorted([
        "vmdeleted 400000000 is not after vmcreated 500000000", "vmcreated is not a number: 'x'",
        "vmcorecount is 0", "CSV row has 5 fields, expected 11", "avgcpu above 100 %: 150.0",
        "avgcpu is not finite: 'nan'", "missing timestamp"])


def test_packing_trace_sqlite(tmp_path):
    path = tmp_path / "packing.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE vm (vmId INT, tenantId INT, vmTypeId INT, priority INT, "
               "starttime REAL, endtime REAL)")
    db.execute("CREATE TABLE vmType (id INT, vmTypeId INT, machineId INT, core REAL, "
               "memory REAL, hdd REAL, ssd REAL, nic REAL)")
    db.executemany("INSERT INTO vmType VALUES (?,?,?,?,?,?,?,?)", [
        (1, 0, 5, 0.25, 0.125, 0, 0, 0), (2, 1, 5, 0.5, 0.25, 0, 0, 0),
        (3, 0, 6, 0.1, 0.1, 0, 0, 0)])
    db.executemany("INSERT INTO vm VALUES (?,?,?,?,?,?)", [
        (1, 7, 0, 0, -0.5, 0.25),   # alive at trace start
        (2, 7, 1, 1, 0.0, None),    # alive at trace end
        (3, 8, 2, 0, 0.1, 0.2),     # type 2 has no size on machine type 5
        (4, 8, 0, 0, 0.3, 0.3),     # zero lifetime
    ])
    db.commit()
    db.close()
    tables = run_text_config(f'azure_packing_2020 {{ sqlite_path: "{path}" }}', tmp_path / "out")
    instances = tables["instances"].sort_values("instance_id")
    assert instances.instance_id.tolist() == ["1", "2"]
    assert instances.pool.tolist() == ["machine_type_5"] * 2
    assert instances.cpu_request.tolist() == [0.25, 0.5]
    assert instances.start_time.tolist() == [-43_200_000_000, 0]
    assert instances.end_time.iloc[0] == 21_600_000_000 and np.isnan(instances.end_time.iloc[1])
    assert instances.user.tolist() == ["7", "7"]
    assert sorted(tables["dead_letters"].reason) == [
        "endtime 0.3 is not after starttime 0.3", "vmTypeId 2 has no size on machine type 5"]
