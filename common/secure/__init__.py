"""Secure transport: the federation CA and certificates, mutual TLS, the signed
roster, secure aggregation by pairwise masks, and the query digest a site signs.
"""
