"""An experiment of one's own, as docs/extending.md shows it: one module that only computes (the configured method's
predictions, their correlations, a table per system, a figure to draw, a metric) and returns it; the one writer
(``face.experiments.result.write``) writes the run file, the tables, the figure and the MLflow logs."""

from functools import partial

import pandas as pd

from face.experiments.common import experiment
from face.experiments.result import Table


def run(plan):
    with experiment(plan) as ctx:                 # the checked, loaded run: its MLflow run open
        out = ctx.predict()                       # the configured method on the selected conversations
        results = ctx.evaluate(out.predictions)   # correlations with the human labels
        labels = pd.DataFrame([(a, c.conv_id, t.turn_ind, v, c.system) for c in ctx.convs for t in c.turns
                               for a, v in t.labels.items()], columns=["aspect", "conv_id", "turn_ind", "human",
                                                                       "system"])
        turns = out.predictions.turn.merge(labels, on=["aspect", "conv_id", "turn_ind"])
        by_system = turns.groupby("system", as_index=False)[["pred", "human"]].mean()
        caption = f"Mean prediction and mean label per system. {out.label}; {ctx.subset}"
        return ctx.result(output=out, results=results, correlations={"": results},
                          tables={"by_system": Table(by_system, caption, digits=4)},
                          figures={"figures/by_system.png": partial(scatter, by_system)},
                          shown=[("Per system", by_system)], metrics={"systems": len(by_system)})


def scatter(table, path):
    """One point per system: a figure is a function of the path it is saved to."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.scatter(table["pred"], table["human"])
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
