"""The checkpoints medanon ships (``checkpoints/*.pt`` of the source tree), by name and file sha256.

They are public: anyone can download them, so a release made only with them can be recomputed by anyone (a
deterministic method's record from a candidate image). A copy installed elsewhere ($MEDANON_MODELS) or renamed is
still one of them: it is recognised by its digest, which is what a release manifest records (``models``).
``tests/test_models_registry.py`` checks this table against ``checkpoints/``: a retrained checkpoint changes it.
"""

from __future__ import annotations

SHIPPED: dict[str, str] = {
    "attacker-sex-fundus64.pt": "aff37612339a42a67487f0a9f46e251af3737464ce302702d70c04f3e1116a80",
    "attacker-sex-xray64.pt": "4fc5ad18816d56a840dcfc563ab4cbf197463d7fccc157a2c7550bd601d49abe",
    "attacker-siamese-fundus64.pt": "07d1437503ca0ace4202705cb5e5be41c458198cb50552729eac4cb9632f150a",
    "attacker-siamese-xray64.pt": "79b99f7ce2faf3d53fcd2d2697c5983fb9006f27bf6d1a6249b3eb7e41866292",
    "classifier-grade-fundus64.pt": "420e14c837d8403b9b948598b137639032bcdb56ed4e0dca321e2b94c44a6e65",
    "classifier-grade-independent-fundus64.pt": "85ddf22fe16b39969b6fb65087334ec7861c2b0ad0857e5ffacfbd4bbd905550",
    "classifier-pneumonia-xray64.pt": "5a3cebbc9eb661eee1813c3ebbcb7b6856c12372faaef243215a368b0d22f9cc",
    "cotrained-fundus64.pt": "8fac44aa9411972c7f0093833c2458bd1b657af29c1cddb071e94b3b6ab52f15",
    "cotrained-map-fundus64.pt": "523dd031fc94b5e7d480de9466238b1b490af66da97a65abbd43498f7c08ca94",
    "cotrained-map-xray64.pt": "e53a59185a07738579db587a01ee8ee1a8a549a6d5f14839aa847f135b85c650",
    "cotrained-xray64.pt": "d942106e36a40b878982dc5ce4dbd1cd3fdeabfea06db5fb3e26765b8545ab28",
    "glow-fundus64.pt": "37fc203a809fb07133f96510942e3f64578616078c8b96d25b49881a563e8352",
    "glow-xray64-normal.pt": "703b2eb42ebd9084b92f83cde324be0ae2aad8c07c5464bfc97a11e4a30e3fae",
    "glow-xray64.pt": "1c3c849b00daffdd2ab38bcfc939f5981923e946f41ac3401a7a57a74e631fd0",
    "identity-attacker-fundus64.pt": "27489c29071614bbfd5be08d3c8d651453283f1bede8f6a505a587a363ca3df6",
    "identity-attacker-independent-fundus24.pt": "f46b2e7cff4303d0a911de0fc2df86ff26541c9efe5f220d8d6573872a0cbc0f",
    "identity-attacker-independent-xray24.pt": "5f88270522c984d3e4e09e22b46eac0cf59dae418dd64311a5de3737d9f33d35",
    "identity-attacker-xray64.pt": "6ecc2364425bf576fe01eb314a1a2203f168534e6839fea815eef8041b444257",
    "identity-fundus64.pt": "9f74ceb53703f0727c5625dc6fb039b29bbb61c1f27a42eb331a5ec9be50f5d0",
    "identity-xray64.pt": "fbf68b54725f89a29fb9f5b17d3ca14276ff049bea83703d21ac2734ce898fc2",
    "restyle-fundus64.pt": "0aa095bf47dc33e16f1d5eb8b95e3e2ed1b58044509ce3d93cf7a77b7591612f",
    "restyle-map-fundus64.pt": "685d5c08364c5d0fd851f9707272b12316202132da3571f39eb200f859b3b924",
    "stylegan2-fundus64-wide.pt": "773ab6ca22e6319e993c4291da2047f420ac16957cc30d8c94b2cf5f772465fe",
    "stylegan2-fundus64-wide.resume.pt": "d817e7423ba2f646f5bcf6d371ac7845a64deca62937514111051facff9e8849",
    "stylegan2-fundus64.pt": "0115c83bdcf181e5424397a6289980c733672bbe66574912fcd516d568f5b6ff",
    "unet-vessels64.pt": "75f80c747776dd0db6058e95f301d8be63edb9a178b37e3bb571ac11eb91bda0",
}


def shipped_name(sha256: str) -> str | None:
    """The shipped checkpoint with this file digest, or None."""
    return BY_DIGEST.get(sha256)


BY_DIGEST = {sha: name for name, sha in SHIPPED.items()}
