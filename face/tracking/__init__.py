"""MLflow tracking, one room per job:

- ``store``: the tracking store checked, pointed at and locked; artifacts beside it; runs whose process is gone;
- ``tracker``: ``Tracker``, one MLflow run per Hydra job (params, metrics, artifacts, tags, dataset, prompts);
- ``names``: what is logged under which name (params, the headline and correlation metrics, the description);
- ``sweeps``: a multirun as one parent run with a child per job; reruns replace a job's earlier child;
- ``prompts``: the Prompt Registry (one version per distinct text) and references to a registered set.
"""

from face.tracking.names import correlation_metrics, description, flatten, summary_metrics
from face.tracking.store import check_tracking_store, use_experiment
from face.tracking.sweeps import is_multirun
from face.tracking.tracker import Tracker, log_last_files

__all__ = ["Tracker", "check_tracking_store", "correlation_metrics", "description", "flatten", "is_multirun",
           "log_last_files", "summary_metrics", "use_experiment"]
