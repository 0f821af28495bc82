"""The last event of time-ordered CSV parts, read from the last part alone: exact on
hand-made parts, and on the shipped Google 2011 sample."""

import gzip

import pytest

from pipelines.sources.last_event import LastEvent, last_event
from tests.helpers import REPO

GOOGLE_2011 = REPO.parent / "shared" / "data" / "google_2011"


def _part(directory, number, lines):
    path = directory / f"part-{number:05d}-of-00500.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def test_the_last_event_is_the_largest_time_of_the_last_part(tmp_path):
    paths = [_part(tmp_path, 0, ["900000000,,1,0", "5,,2,1"]),
             _part(tmp_path, 1, ["20,,1,1", "40,,3,0", "not a time,,4,0",
                                 f"{2**63 - 1},,5,4", "30,,6,0"])]
    assert last_event(paths) == LastEvent(40, "part-00001-of-00500.csv.gz")


def test_no_numbered_part_or_no_time_gives_none(tmp_path):
    assert last_event([]) is None
    plain = tmp_path / "events.csv.gz"
    with gzip.open(plain, "wt") as f:
        f.write("1,,2\n")
    assert last_event([str(plain)]) is None
    assert last_event([_part(tmp_path, 3, ["x,,1", f"{2**63 - 1},,2"])]) is None


@pytest.mark.skipif(not GOOGLE_2011.exists(), reason="../shared/data/google_2011 is absent")
def test_the_google_2011_sample_ends_at_day_14_5():
    found = last_event(sorted(str(p) for p in (GOOGLE_2011 / "job_events").glob("part-*")))
    assert found == LastEvent(1253399974149, "part-00249-of-00500.csv.gz")
