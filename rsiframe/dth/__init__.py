"""The D/T/H target (data, trainer, harness): building a candidate's model in the sandbox with
its content-addressed cache, the contamination audit of everything training reads, the host
facts that decide numerics, and the model server.
"""
