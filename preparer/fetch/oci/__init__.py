"""Buildpackages: OCI images in registries (:mod:`.image`), ``.cnb`` files (:mod:`.layout`) and the buildpack
registry (:mod:`.index`), on one registry client (:mod:`.client`) and one reader of buildpackage images
(:mod:`.buildpackage`)."""
