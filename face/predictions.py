"""Predictions: a turn score per (aspect, conversation, turn) and a dialogue score per (aspect, conversation).

Every method's output, the run file, the meta-evaluation and the reports share this one type. Predictions are
rounded to ``PRED_DECIMALS`` decimals where they are made: different summation orders of the same numbers differ
in the last bits, and such noise would break (or invent) ties and so move rank correlations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PRED_DECIMALS = 10
TURN_COLUMNS = ["aspect", "conv_id", "turn_ind", "pred"]
DIALOGUE_COLUMNS = ["aspect", "conv_id", "pred"]


@dataclass
class Predictions:
    """Turn predictions (``TURN_COLUMNS``) and dialogue predictions (``DIALOGUE_COLUMNS``)."""

    turn: pd.DataFrame
    dialogue: pd.DataFrame

    @staticmethod
    def empty() -> Predictions:
        return Predictions(pd.DataFrame(columns=TURN_COLUMNS), pd.DataFrame(columns=DIALOGUE_COLUMNS))


def round_preds(values) -> np.ndarray:
    """``values`` (predictions, or means of them) rounded to ``PRED_DECIMALS`` decimals, so equal ones tie."""
    return np.round(np.asarray(values, float), PRED_DECIMALS)
