"""Whether a float32 product made now comes out in bfloat16 (CPU autocast on), the same on every torch the project
supports (torch 2.1 has no ``torch.is_autocast_enabled("cpu")``)."""

import torch


def bfloat16_products() -> bool:
    return (torch.ones(1, 1) @ torch.ones(1, 1)).dtype == torch.bfloat16
