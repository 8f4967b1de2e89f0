"""The conformance vectors' generator, in parts (``vectors/generate.py`` runs it): the
test keys and the reference canonical form (:mod:`.common`), Ed25519 signatures with a
chosen nonce (:mod:`.nonce`), the events' builders and a case (:mod:`.building`), the
cases (``cases_*``) and the writing of a case's files (:mod:`.writing`).
"""
