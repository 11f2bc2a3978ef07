"""How hard each term of the inversion trainers' reconstruction loss pulls on the image (issue 12).

For a codec and a folder of images, prints the value of each term (MSE, feature distance, detail MSE
of ``x - gaussian_blur(x)``) and the norm of its gradient with respect to the reconstruction G(E(x)),
one JSON line. A term whose weighted gradient is a hundredth of another's does not shape the codec.

    python docs/loss_balance.py --model checkpoints/cotrained-fundus64.pt --data PH1 --images 16
"""

from __future__ import annotations

import argparse
import json

import torch

from medanon.codecs.stylegan import load_codec
from medanon.data.dataset import open_dataset
from medanon.evaluate.reconstruction import perceptual_distance
from medanon.models.features import get_feature_network
from medanon.train.recon_loss import high_pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a ReStyle or co-trained codec checkpoint")
    ap.add_argument("--data", required=True, help="images the codec was not trained on")
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument("--layers", default="block1,block2,block3", help="feature layers, as in the training config")
    ap.add_argument("--sigma", type=float, default=1.0, help="detail_sigma")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = open_dataset(args.data)
    x = torch.stack([ds[i]["image"] for i in range(min(args.images, len(ds)))])
    codec = load_codec(args.model)
    with torch.no_grad():
        recon = codec.reconstruct(x)
    net = get_feature_network("efficientnet-lite0", device=torch.device("cpu"), input_size=x.shape[-1])
    layers = tuple(args.layers.split(","))
    terms = {"pixel": lambda r: (r - x).square().mean(),
             "perceptual": lambda r: perceptual_distance(r, x, network=net, layers=layers).mean(),
             "detail": lambda r: (high_pass(r, args.sigma) - high_pass(x, args.sigma)).square().mean()}
    out = {"model": args.model, "images": len(x)}
    for name, f in terms.items():
        r = recon.clone().requires_grad_(True)
        value = f(r)
        value.backward()
        out[name] = {"value": round(float(value.detach()), 6), "grad_norm": round(float(r.grad.norm()), 6)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
