"""The launch form's tooltips: what each setting does, in words (kept apart: the form is near its size limit)."""
from __future__ import annotations

#: attribute of the LaunchPanel → its tooltip
TIPS = {
    "workload": "What to train: a built-in workload (synthetic data, nothing to download) or your own script",
    "script_dir": "The folder with your training script; on This computer it runs there, to another host it is "
                  "uploaded (files its .gitignore or .ddpguiignore leave out and large files are skipped)",
    "script_entry": "The script torchrun starts, relative to the folder",
    "script_args": "Arguments passed to your script, as on a command line",
    "metric_regex": "A regular expression that finds metrics in your script's output (named groups become "
                    "series); leave empty for the built-in reporting",
    "nproc": "Processes torchrun starts per node: one per GPU on a GPU host, CPU processes (gloo) otherwise",
    "compile": "torch.compile: off, or a compile mode (the first steps are slower while it compiles)",
    "precision": "Numeric precision of the training; precisions this host cannot run are greyed out (hover them "
                 "for why)",
    "batch": "Samples per process per step; the global batch is this × processes × gradient accumulation",
    "length": "How long the run trains, in the unit next to it",
    "length_unit": "Count the length in steps, epochs or minutes of training",
    "name": "A name for the run in the runs table (empty: made of workload, processes and precision)",
    "tags": "Comma-separated tags to find and group runs by",
    "advanced": "More settings: model size, learning rate, optimizer, gradient accumulation, data loading, seed, "
                "backend, warm-up, environment",
    "model_size": ("The built-in workload's size: small takes seconds on a CPU, large keeps a GPU busy (the "
                   "transformer: 0.5 M or 43 M parameters); auto: large on a GPU, small elsewhere"),
    "lr": "The optimizer's learning rate",
    "optimizer": "The optimizer of the built-in workloads",
    "grad_accum": "Steps whose gradients are accumulated before each optimizer step (a larger global batch "
                  "without more memory)",
    "num_workers": "DataLoader worker processes per training process (0: load in the training process)",
    "seed": "Random seed: the same seed and settings give the same run",
    "backend": "The torch.distributed backend: nccl for GPUs, gloo for CPUs, auto picks",
    "warmup": "Steps left out of the steady throughput (compilation, caches warming up)",
    "env": "Environment variables for the training processes, NAME=value, one per line",
    "outputs_dir": ("A folder on the host the run writes files to (besides its run folder): listed and fetched by "
                    "Download outputs… and ddpgui pull; a relative path is taken from where the run works (its script's "
                    "folder, else its run folder)"),
    "keep_outputs": ("Download the run's outputs (the files it wrote, and the Outputs folder) as it ends, whenever the "
                     "app or the command line is connected; a release that destroys the host's disk waits for them"),
    "launch_button": "Launch the run (Ctrl+Return)",
}


def apply_tips(panel) -> None:
    """Give each of the form's controls its tooltip (one set already is kept)."""
    for attr, tip in TIPS.items():
        widget = getattr(panel, attr)
        if not widget.toolTip():
            widget.setToolTip(tip)
