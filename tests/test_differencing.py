"""The differencing attack on two releases of the same people, on releases whose answer is known: nested averages
give up the people the smaller one leaves out; disjoint people, a constant release and a release that already
shows everyone add nothing."""

import numpy as np
import pytest
import torch

from medanon.evaluate.attacks.differencing import Space, differencing

SIZE = 12


def _people(n: int, seed: int, per: int = 1) -> tuple[torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 1, 3, SIZE, SIZE, generator=g) * 1.6 - 0.8
    imgs = (base + 0.1 * torch.randn(n, per, 3, SIZE, SIZE, generator=g)).clamp(-1, 1).flatten(0, 1)
    return imgs, np.repeat([f"{seed}-{i}" for i in range(n)], per)


def _q(x: torch.Tensor) -> torch.Tensor:
    """8-bit, as a release folder stores it."""
    return torch.round((x + 1) * 127.5) / 127.5 - 1


def _release(images, patients, groups) -> tuple[torch.Tensor, list[int]]:
    """One record per group of patients: the mean of its patients' mean images (k-Same-Pixel's weights)."""
    pats = np.asarray(patients)
    means = {p: images[torch.from_numpy(np.flatnonzero(pats == p))].mean(0) for p in dict.fromkeys(pats)}
    return _q(torch.stack([torch.stack([means[p] for p in g]).mean(0) for g in groups])), [len(g) for g in groups]


def _attack(a, b, members, controls, scale):
    return differencing(release_a=a[0], people_a=a[1], release_b=b[0], people_b=b[1], member_images=members[0],
                        member_patients=members[1], control_images=controls[0], control_patients=controls[1],
                        scale_images=scale[0], scale_patients=scale[1])


@pytest.fixture(scope="module")
def world():
    members, controls, scale = _people(30, 0, per=2), _people(20, 1, per=2), _people(20, 2)
    names = list(dict.fromkeys(members[1]))
    return members, controls, scale, names


def test_nested_averages_give_up_the_people_the_smaller_one_leaves_out(world):
    members, controls, scale, names = world
    a = _release(*members, [names[i:i + 3] for i in range(0, 30, 3)])          # k = 3
    b = _release(*members, [names[i:i + 2] for i in range(0, 30, 3)])          # the first two of each: k = 2
    got = _attack(a, b, members, controls, scale)
    m, c = got["members"], got["controls"]
    assert (m["patients"], m["recovered"], m["shown_alone"], m["recovered_beyond"]) == (30, 10, 0, 10)
    assert c["recovered"] == 0 and got["pairs"] == 100
    assert m["median_error"] < 0.01 < got["threshold"]["value"]              # the 8-bit rounding, nothing more
    rr = got["risk"]["residual_risk"]
    assert got["risk"]["n"] == 30 and got["risk"]["attack"]["rate"] == pytest.approx(1 / 3) and rr["ci"][0] > 0.1


def test_records_shown_as_either_eye_give_up_the_same_people(world):
    """Known answer with eye alignment (k-Same on fundus photographs): each patient's real image is a right eye or
    a left one (the mirror image), the records average the right-eye views and are shown mirrored where most of
    their patients' eyes are left ones. The difference isolating a left-out person may then be mirrored, or the two
    records shown as different eyes: taken in both orientations, the attack recovers the same 10 people as without
    alignment, and still no control; in one orientation it misses some."""
    members, controls, scale, names = world
    side = dict(zip(names, np.random.default_rng(3).random(len(names)) < 0.5, strict=True))      # True: a left eye
    pats = np.asarray(members[1])
    left = torch.from_numpy(np.array([side[p] for p in pats]))[:, None, None, None]
    real = torch.where(left, members[0].flip(-1), members[0])          # the photographs as taken

    def shown(groups):
        images, people = _release(*members, groups)                    # averages of the right-eye views
        flip = torch.tensor([sum(side[p] for p in g) * 2 > len(g) for g in groups])[:, None, None, None]
        return torch.where(flip, images.flip(-1), images), people

    a = shown([names[i:i + 3] for i in range(0, 30, 3)])
    b = shown([names[i:i + 2] for i in range(0, 30, 3)])
    kw = {"member_images": real, "member_patients": members[1], "control_images": controls[0],
          "control_patients": controls[1], "scale_images": scale[0], "scale_patients": scale[1]}
    both = differencing(release_a=a[0], people_a=a[1], release_b=b[0], people_b=b[1], mirrored=True, **kw)
    assert both["members"]["recovered_beyond"] == 10 and both["controls"]["recovered"] == 0
    one = differencing(release_a=a[0], people_a=a[1], release_b=b[0], people_b=b[1], **kw)
    assert one["members"]["recovered_beyond"] < 10


def test_a_patient_with_both_eyes_is_recovered_as_their_aligned_mean(world):
    """Real data holds both eyes of a person: an aligned k-Same record averages the right eye and the mirrored left
    one, so a difference isolates the mean of those two, which is neither eye's photograph nor the mean of the photos.
    With each image's side given, the attack compares that mean too, and recovers the left-out people."""
    members, controls, scale, names = world
    pats = np.asarray(members[1])                    # two images each: take the first as the right eye, the second
    first = np.asarray([i for i in range(len(pats)) if i == 0 or pats[i] != pats[i - 1]])
    sides = np.ones(len(pats), int)
    sides[first + 1] = 0                             # a left eye: its photograph is the mirror of its view
    other = _people(30, 7, per=2)[0]                 # a different anatomy for the left eye of each person
    views = members[0].clone()
    views[first + 1] = other[first + 1]
    real = views.clone()
    real[first + 1] = views[first + 1].flip(-1)
    a = _release(views, pats, [names[i:i + 3] for i in range(0, 30, 3)])
    b = _release(views, pats, [names[i:i + 2] for i in range(0, 30, 3)])
    kw = {"member_images": real, "member_patients": members[1], "control_images": controls[0],
          "control_patients": controls[1], "scale_images": scale[0], "scale_patients": scale[1], "mirrored": True}
    got = differencing(release_a=a[0], people_a=a[1], release_b=b[0], people_b=b[1],
                       sides=np.concatenate([sides, np.ones(len(controls[1]), int)]), **kw)
    assert got["members"]["recovered_beyond"] == 10 and got["controls"]["recovered"] == 0
    blind = differencing(release_a=a[0], people_a=a[1], release_b=b[0], people_b=b[1], **kw)
    assert blind["members"]["recovered_beyond"] < 10


def test_disjoint_people_constant_and_copies_add_nothing(world):
    members, controls, scale, names = world
    first = _release(*members, [names[i:i + 3] for i in range(0, 15, 3)])
    second = _release(*members, [names[i:i + 2] for i in range(15, 29, 2)])
    got = _attack(first, second, members, controls, scale)
    assert got["members"]["recovered"] == 0 and got["risk"]["residual_risk"]["ci"][0] == 0

    pairs = _release(*members, [names[i:i + 2] for i in range(0, 30, 2)])
    constant = (torch.zeros(15, 3, SIZE, SIZE), [1] * 15)
    assert _attack(pairs, constant, members, controls, scale)["members"]["recovered"] == 0

    # a copy of every patient's mean image shows each alone: the difference adds no one
    copies = _release(*members, [[p] for p in names])
    got = _attack(pairs, copies, members, controls, scale)
    assert got["members"]["recovered"] == 30 and got["members"]["shown_alone"] == 30
    assert got["members"]["recovered_beyond"] == 0 and got["risk"]["residual_risk"]["ci"][0] == 0


def test_a_copy_of_half_the_people_gives_up_their_partners(world):
    members, controls, scale, names = world
    pairs = _release(*members, [names[i:i + 2] for i in range(0, 30, 2)])
    half = _release(*members, [[names[i]] for i in range(0, 30, 2)])
    got = _attack(pairs, half, members, controls, scale)
    assert got["members"]["recovered_beyond"] == 15 and got["members"]["shown_alone"] == 15
    assert got["controls"]["recovered"] == 0


def test_the_distances_from_inner_products_are_those_of_the_differences_formed():
    """Centred float32 inner products give the distances of the differences formed one by one (pairs whose counts
    differ by one, or by up to max_gap), pooled to ``side`` when the images are larger."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(5, 1, 8, 8, generator=g) * 2 - 1, torch.rand(4, 1, 8, 8, generator=g) * 2 - 1
    refs = torch.rand(7, 1, 8, 8, generator=g) * 2 - 1
    na, nb = np.array([3, 2, 3, 4, 1]), np.array([2, 1, 3, 2])
    for side, max_gap in ((8, 1), (8, 3), (4, 1)):
        pool = (lambda x: x) if side == 8 else (lambda x: torch.nn.functional.avg_pool2d(x, 2))
        brute = torch.full((7,), float("inf"), dtype=torch.float64)
        for i in range(5):
            for j in range(4):
                if 0 < abs(na[i] - nb[j]) <= max_gap:
                    d = (na[i] * pool(a[i:i + 1]).double() - nb[j] * pool(b[j:j + 1]).double()) / (na[i] - nb[j])
                    brute = torch.minimum(brute, (pool(refs).double() - d).pow(2).flatten(1).mean(1).sqrt())
        space = Space(refs, [str(n) for n in range(7)], side=side)
        for chunk in (1, 7, 1 << 22):                                          # one pair at a time, or all
            got = space.nearest_difference(space.released(a, na), space.released(b, nb), max_gap=max_gap,
                                           chunk=chunk)
            torch.testing.assert_close(got.double(), brute, atol=1e-5, rtol=1e-5)


def test_bad_settings_are_refused(world):
    members, controls, scale, names = world
    a = _release(*members, [names[:2]])
    with pytest.raises(ValueError, match="fraction"):
        differencing(release_a=a[0], people_a=a[1], release_b=a[0], people_b=a[1], member_images=members[0],
                     member_patients=members[1], control_images=controls[0], control_patients=controls[1],
                     scale_images=scale[0], scale_patients=scale[1], fraction=1.5)
    with pytest.raises(ValueError, match="at least 2 patients"):
        _attack(a, a, members, controls, (scale[0][:1], scale[1][:1]))
    with pytest.raises(ValueError, match="both a member and a control"):
        _attack(a, a, members, members, scale)


def test_the_public_codec_inverts_images_of_any_evaluation_size():
    """The evaluation's inverter loads a shipped codec by name and gives one latent row per image, resizing images of
    another size to the codec's; the same image gives the same row."""
    from types import SimpleNamespace

    import torch

    from medanon.evaluate.cautions import _inverter

    invert = _inverter(SimpleNamespace(device=torch.device("cpu")), "restyle-map-fundus64.pt")
    x = torch.rand(3, 3, 32, 32) * 2 - 1
    rows = invert(x)
    assert rows.shape[0] == 3 and rows.ndim == 2 and rows.dtype == torch.float32
    assert torch.allclose(invert(x[:1]), rows[:1], atol=1e-4)        # batch size changes only rounding
    big = torch.nn.functional.interpolate(x, size=(64, 64), mode="bilinear", antialias=True, align_corners=False)
    assert torch.allclose(invert(big), rows, atol=1e-4)


@pytest.mark.slow
def test_a_held_out_split_of_one_patient_leaves_differencing_unmeasured_with_a_note(tmp_path):
    """Two releases of the same patients, a held-out split of one patient: the differencing threshold (a fraction of
    the distance between two people) has no scale. The evaluation ended in a ValueError traceback after all its
    work, with no report, on every rerun; it now says why differencing was not measured."""
    import json

    from click.testing import CliRunner

    from medanon.cli import cli

    def run(*args):
        r = CliRunner().invoke(cli, ["--device", "cpu", *map(str, args)])
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output

    ph, splits = tmp_path / "ph", tmp_path / "splits.csv"
    run("phantom", "--patients", 12, "--per-patient", 2, "--size", 32, "--out", ph)
    run("data", "split", ph, "--out", splits)
    for method, setting in (("kpixel", ["--k", 2]), ("snow", ["--p", 0.3, "--seed", 1])):
        run("anonymize", method, "--data", ph, *setting, "--size", 32, "--split", "train", "--splits", splits,
            "--out", tmp_path / method, "--mapping", tmp_path / f"{method}.json")
    run("evaluate", "--preset", "tiny", "--no-inception", "--size", 32, "--splits", splits, "--real", ph,
        "--release", tmp_path / "kpixel", "--release", tmp_path / "snow", "--mapping", f"kpixel={tmp_path}/kpixel.json",
        "--mapping", f"snow={tmp_path}/snow.json", "--out", tmp_path / "report")
    notes = json.loads((tmp_path / "report" / "report.json").read_text())["notes"]
    assert any("differencing of kpixel, snow is not measured" in n and "1 patient(s)" in n for n in notes)


def test_releases_of_the_same_people_that_cannot_be_differenced_are_named():
    """Two releases of the same patients with one person per record (nothing to subtract), and a release without
    its mapping: the report says differencing was not measured and why, instead of saying nothing."""
    from types import SimpleNamespace

    import numpy as np

    from medanon.evaluate.cautions import differencing_results

    notes: list[str] = []
    ctx = SimpleNamespace(real=SimpleNamespace(patients=np.array(["a", "a", "b", "c"])), note=notes.append)
    one = SimpleNamespace(name="snow", sources=[[0], [2]], labels=None, rows=[{"n_people": "1"}] * 2)
    two = SimpleNamespace(name="ldp", sources=[[1], [3]], labels=None, rows=[{"n_people": "1"}] * 2)
    blind = SimpleNamespace(name="gmia", sources=None, rows=[])
    assert differencing_results(ctx, [one, two, blind]) == []
    assert notes[0].startswith("differencing is not measured: the releases that share patients (snow × ldp) have no")
    assert notes[1].startswith("differencing is not measured for gmia: without a mapping")


def test_a_release_without_people_counts_is_named_for_that_reason():
    """Two releases of the same patient where one gives no n_people: the note says the count is missing, not that no
    two records differ by one person (which nobody could know)."""
    from types import SimpleNamespace

    import numpy as np

    from medanon.evaluate.cautions import differencing_results

    notes: list[str] = []
    ctx = SimpleNamespace(real=SimpleNamespace(patients=np.array(["a", "a", "b"])), note=notes.append)
    counted = SimpleNamespace(name="kpixel", sources=[[0, 2]], labels=None, rows=[{"n_people": "2"}])
    bare = SimpleNamespace(name="other", sources=[[1]], labels=None, rows=[{"image": "x.png"}])
    assert differencing_results(ctx, [counted, bare]) == []
    assert notes == ["differencing is not measured for kpixel × other, which share patients: a release of them does "
                     "not give every record's number of people (labels.csv's n_people), which the attack needs to "
                     "find records that differ by one person"]
