"""What a RolloutJob owns: worker and evaluator pods (their images, disruptions), and the PDB, Service, NetworkPolicy and Secrets kept beside them (one keep_owned())."""
