"""Order of the gallery examples (sphinx-gallery ``within_subsection_order``).

Kept in an importable module, not in ``conf.py``, so that Sphinx can cache
the configuration (a class defined in ``conf.py`` cannot be pickled).
"""

ORDER = (
    "plot_toy_datasets.py",
    "plot_objective_path.py",
    "plot_graph_clustering.py",
    "plot_segment_image.py",
    "plot_pretrained_vit.py",
    "plot_grid_search.py",
)


class GalleryOrder:
    """Sort key: the examples of :data:`ORDER` first, in that order, then the
    others by file name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        rank = ORDER.index(filename) if filename in ORDER else len(ORDER)
        return (rank, filename)

    def __repr__(self):
        return f"<{type(self).__name__}: {ORDER}>"
