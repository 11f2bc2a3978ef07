"""A DP-GLOW release whose inverse flow diverged says so: each record's fallback is kept in the private journal (so a
resumed release counts exactly), its manifest totals them under ``quality``, and the evaluation report shows it."""

import json
import warnings
from pathlib import Path

import pytest
import torch

import medanon
from medanon.evaluate.report import render_html
from medanon.evaluate.setting_notes import fallback_note
from medanon.models.glow import Glow, GlowCodec, GlowConfig
from medanon.release import ReleaseWriter, read_release
from medanon.release.files import DIVERGED_WHAT

SIZE = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return medanon.make_phantom(tmp_path_factory.mktemp("dpglow") / "xray", modality="xray", patients=4,
                                per_patient=2, size=SIZE)


@pytest.fixture
def codec() -> GlowCodec:
    flow = Glow(GlowConfig(resolution=SIZE, channels=1, levels=2, depth=1, hidden=8))
    flow.train()
    flow.log_prob(torch.rand(8, 1, SIZE, SIZE, generator=torch.Generator().manual_seed(0)) - 0.5)   # data init
    return GlowCodec(flow.eval())


def diverge(monkeypatch, codec: GlowCodec, on: bool = True) -> None:
    """The inverse flow diverges (decodes to 1e6) on every latent but the prior's mode, so each image is decoded
    from its latent shrunk all the way to the mode; ``on=False``: the flow as it is."""
    real = type(codec.flow).decode.__get__(codec.flow)

    def decode(eps):
        x = real(eps)
        off = eps.flatten(1).abs().sum(1) > 0
        return x + 1e6 * off.to(x.dtype).view(-1, *[1] * (x.dim() - 1))

    monkeypatch.setattr(codec.flow, "decode", decode if on else real)


def release(ds, codec, out: Path, **kw) -> Path:
    rel = medanon.anonymize.dpglow(ds, epsilon=1.0, flow=codec, batch=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # a weak budget, the divergence: asserted elsewhere
        return rel.save(out, progress=False, **kw)


def test_the_manifest_counts_the_images_decoded_by_the_fallback(data, codec, tmp_path, monkeypatch):
    ds = medanon.open_dataset(data, size=SIZE)
    rel = medanon.anonymize.dpglow(ds, epsilon=1.0, flow=codec, batch=3)
    diverge(monkeypatch, codec)
    with pytest.warns(UserWarning, match=f"diverged on {len(ds)} images released in this run"):
        rel.save(tmp_path / "all", progress=False)
    manifest, _ = read_release(tmp_path / "all")
    assert manifest["quality"] == {"diverged": len(ds), "diverged_what": DIVERGED_WHAT}
    assert rel.summary["diverged"] == len(ds)
    assert medanon.audit(tmp_path / "all").passed

    diverge(monkeypatch, codec, on=False)                # a flow that decodes every latent: 0, said
    release(ds, codec, tmp_path / "none")
    assert read_release(tmp_path / "none")[0]["quality"]["diverged"] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        medanon.anonymize.ldp_image(ds, epsilon=1.0).save(tmp_path / "pixels", progress=False)
    assert "quality" not in read_release(tmp_path / "pixels")[0]    # no flow, nothing to fall back from


@pytest.mark.parametrize("first_run_diverges", [True, False])
def test_a_resumed_release_counts_the_records_of_both_runs(data, codec, tmp_path, monkeypatch, interrupted_after,
                                                          first_run_diverges):
    """Interrupted after 3 records, the flow diverging in one run only: the manifest counts exactly the records
    decoded by the fallback, whichever run wrote them."""
    ds = medanon.open_dataset(data, size=SIZE)
    out = tmp_path / "rel"
    diverge(monkeypatch, codec, on=first_run_diverges)
    with interrupted_after(4), pytest.raises(KeyboardInterrupt):
        release(ds, codec, out)
    journal = [json.loads(line) for line in (tmp_path / "rel.partial" / ".journal.jsonl").read_text().splitlines()]
    assert [e["quality"] for e in journal[1:]] == [{"diverged": first_run_diverges}] * 3    # kept per record
    diverge(monkeypatch, codec, on=not first_run_diverges)
    release(ds, codec, out)
    expected = 3 if first_run_diverges else len(ds) - 3
    assert read_release(out)[0]["quality"]["diverged"] == expected


def test_records_of_other_processes_are_counted(tmp_path):
    """Under torchrun, records another process wrote carry their fallback in its rank journal, which the release
    takes in (at the end, or when resumed)."""
    from medanon.data.records import Record
    from medanon.release.sharded import ShardWriter
    from medanon.train.distributed import Dist

    recs = [Record(path=Path(f"r{i}.png"), patient_id=f"p{i}", record_id=f"r{i}") for i in range(3)]
    image = torch.zeros(1, 4, 4)
    kw = {"method": "dpglow", "params": {}, "privacy": {}, "labels": []}
    with pytest.raises(KeyboardInterrupt), ReleaseWriter(tmp_path / "rel", **kw) as main:
        main.add("r0", image, recs[:1], quality={"diverged": True})
        head = (main.partial / ".journal.jsonl").read_text().splitlines()[0] + "\n"
        other = ShardWriter(Dist(rank=1, world_size=2), partial=main.partial, settings=main.settings, privacy={},
                            resumed={}, head_line=head)
        assert [k for k in ("r1", "r2") if not other.done(k)] == ["r2"]        # r1 is rank 0's, r2 rank 1's
        other.add("r2", image, recs[2:], quality={"diverged": True})
        raise KeyboardInterrupt
    with ReleaseWriter(tmp_path / "rel", **kw) as resumed:
        assert len(resumed) == 2
        resumed.add("r1", image, recs[1:2], quality={"diverged": False})
    assert read_release(tmp_path / "rel")[0]["quality"]["diverged"] == 2


def test_the_report_says_the_utility_measures_the_fallback(codec, tmp_path, monkeypatch):
    from conftest import smallest_eval_config
    from medanon.data.dataset import subset
    from medanon.data.splits import split_patients, write_splits_csv

    ds = medanon.open_dataset(medanon.make_phantom(tmp_path / "xray", modality="xray", patients=8, per_patient=2,
                                                   size=SIZE), size=SIZE)
    split = split_patients(ds.records, val=0.25, test=0.25, stratify="", seed=0)
    write_splits_csv(tmp_path / "splits.csv", ds.records, split)
    train = subset(ds, [i for i, r in enumerate(ds.records) if split[r.patient_id] == "train"])
    diverge(monkeypatch, codec)
    out = release(train, codec, tmp_path / "rel", mapping=tmp_path / "rel.mapping.json")
    cfg = smallest_eval_config(SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        medanon.evaluate(real=ds, releases=[out], config=cfg, splits=tmp_path / "splits.csv",
                         out=tmp_path / "report", progress=False)
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    n = len(train)
    assert rep["releases"][0]["quality"] == {"diverged": n, "diverged_what": DIVERGED_WHAT}
    note = (f"release rel: the inverse flow diverged on {n} of {n} images: they were decoded from latents shrunk "
            "towards the prior's mode and may look averaged; its utility and fidelity measure that decoder fallback, "
            "not the flow")
    assert [m for m in rep["notes"] if "inverse flow" in m] == [note]
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"<td>{n}<br><span class=note>{n} decoded by the fallback" in page          # in the releases table
    assert "measure that decoder fallback, not the flow" in page                      # and the note below it

    assert fallback_note("x", {"diverged": 0, "diverged_what": DIVERGED_WHAT}, 8) is None
    assert fallback_note("x", None, 8) is None
    assert "for 2 records the release did not record" in fallback_note("x", {"diverged": 1, "diverged_unknown": 2}, 8)
    from test_report_text import _minimal_report

    rep = _minimal_report({})
    rep["releases"][0]["quality"] = {"diverged": 0, "diverged_what": DIVERGED_WHAT}
    assert "decoded by the fallback" not in render_html(rep, {})                      # none: nothing said
