"""The Siamese verification attacker (Packhäuser et al. 2022): it learns to verify on a tiny phantom (held-out
patients well above chance), finds a copy release, not an unrelated one, and its rows carry control, baseline
and n."""

import numpy as np
import pytest
import torch

from medanon.config import PhantomConfig
from medanon.evaluate.attacks.siamese import SiameseConfig, siamese_attack, train_siamese
from medanon.evaluate.attacks.siamese import embed as siamese_embed
from medanon.evaluate.inputs import load_real
from medanon.phantoms.generate import generate

SIZE = 32


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("siamese")
    data = generate(PhantomConfig(patients=48, per_patient=3, size=SIZE, workers=1), root / "fundus", progress=False)
    real = load_real(data, size=SIZE)
    pats = np.unique(real.patients)
    train_p, member_p, held_p = set(pats[:24]), set(pats[24:36]), set(pats[36:])
    rows = {name: np.flatnonzero([p in s for p in real.patients]) for name, s in
            (("train", train_p), ("members", member_p), ("held", held_p))}
    net = train_siamese(real.images[rows["train"]], real.patients[rows["train"]],
                        cfg=SiameseConfig(image_size=SIZE, width=8, steps=300, batch=32))  # 150: seed-fragile
    return real, rows, net


def _attack(real, rows, net, release_images, record_patients):
    held = rows["held"]
    half = np.isin(real.patients[held], np.unique(real.patients[held])[:6])
    feats = siamese_embed(net, real.images)
    return siamese_attack(net, real_feats=feats, release_feats=siamese_embed(net, release_images),
                          patients=real.patients, source_rows=rows["members"], record_patients=record_patients,
                          member_rows=rows["members"], calib_rows=held[half], control_rows=held[~half],
                          max_pairs=500)


def test_siamese_learns_to_verify_held_out_patients(trained):
    real, rows, net = trained
    members = rows["members"]
    copy = _attack(real, rows, net, real.images[members], [frozenset([p]) for p in real.patients[members]])
    ref = copy["reference"]                                  # real pairs of patients it never trained on
    assert ref["AUC"] > 0.75 and ref["AUC_ci"][0] > 0.5, ref["AUC"]
    assert ref["genuine_pairs"] == 12 * 3 and ref["impostor_pairs"] > 100
    # a copy release: every source pair with its own record; the attacker links them like real pairs
    assert copy["outer"]["AUC"] > 0.75 and copy["n"] == copy["outer"]["genuine_pairs"] == len(members) * 3
    m = copy["membership"]
    assert m["auc"] > 0.6 and m["n_members"] == len(members)       # 36 members vs 18 controls: a small test
    # an unrelated release (images of the held-out patients, claiming the members): nothing to link
    rng = np.random.default_rng(0)
    other = real.images[rng.permutation(rows["train"])[:len(members)]]
    unrel = _attack(real, rows, net, other, [frozenset([p]) for p in real.patients[members]])
    assert unrel["outer"]["AUC_two_sided"] < 0.7 and unrel["membership"]["two_sided_auc"] < 0.75
    assert copy["outer"]["AUC"] > unrel["outer"]["AUC_two_sided"] + 0.1


def test_siamese_rows_carry_control_baseline_and_n(trained):
    real, rows, net = trained
    members = rows["members"]
    out = _attack(real, rows, net, real.images[members], [frozenset([p]) for p in real.patients[members]])
    for risk in (out["risk"], out["risk_reverse"]):
        assert {"attack", "control", "baseline", "residual_risk", "against", "n"} <= set(risk)
        assert risk["against"] == "control" and risk["control"]["trials"] == out["membership"]["n_controls"]
    assert out["n"] > 0 and out["membership"]["n"] == len(members)
    for row in (out["reference"], out["outer"]):
        assert {"AUC", "AUC_ci", "AUC_two_sided", "TAR", "TAR_ci", "genuine_pairs", "impostor_pairs", "n"} <= set(row)


def test_siamese_is_symmetric_and_seeded(trained):
    real, rows, net = trained
    a, b = real.images[:5], real.images[5:10]
    with torch.no_grad():
        assert torch.allclose(net(a, b), net(b, a), atol=1e-5)
    x, p = real.images[rows["train"]], real.patients[rows["train"]]
    cfg = SiameseConfig(image_size=16, width=4, steps=3, batch=8)
    n1, n2 = train_siamese(x, p, cfg=cfg), train_siamese(x, p, cfg=cfg)
    assert all(torch.equal(u, v) for u, v in zip(n1.state_dict().values(), n2.state_dict().values(), strict=True))
    with pytest.raises(ValueError, match="two or more patients"):
        train_siamese(x[:2], ["a", "b"], cfg=cfg)
