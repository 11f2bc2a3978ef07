"""Anonymisation methods: each turns images (or their latents) into the images of a release.

One module per method family; each releases through :class:`medanon.release.ReleaseWriter`.
"""
