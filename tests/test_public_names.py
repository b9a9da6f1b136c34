"""Every public name of the library when issue 51 was filed (f57b674) still imports.

Issue 51 made the library lighter on the condition that a user's imports keep working: a
moved or retired name stays, warning, for a release. The list is the top-level
functions, classes and constants without a leading underscore of each module at f57b674.
Left out, as no user's name: `data.corpus.logger` (a module's logger), `data.glue.PACK_CHUNK`
(the retired packer's chunk size), `models.preset_folders.PRESET_FILES` (keras-hub's file
names, which keras-hub owns), `models.tupe_bpe_tokenizer.END_OF_WORD` (subword-nmt's
marker, which subword-nmt now applies) and `models.tupe_bpe_tokenizer.tf` (a lazy import).
Made with, for each `keras_tupe/**.py` of `git ls-tree -r --name-only f57b674 keras_tupe`:

    tree = ast.parse(subprocess.check_output(["git", "show", f"f57b674:{path}"], text=True))
    names = sorted(n for node in tree.body for n in (
        [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
        [t.id for t in getattr(node, "targets", [getattr(node, "target", None)])
         if isinstance(t, ast.Name)]) if not n.startswith("_"))
"""

import importlib
import warnings

import pytest

PUBLIC_AT_F57B674 = {
    "keras_tupe.callbacks": "AtomicBackupAndRestore SEEDS StepCheckpoint StepLogger StepProgress WEIGHTS",
    "keras_tupe.convert": "KINDS convert convert_fairseq convert_huggingface",
    "keras_tupe.convert.common": (
        "ConversionError assign_weights file_records refuse_existing_output require_file "
        "sha256 write_preset"
    ),
    "keras_tupe.convert.fairseq": (
        "ARCHITECTURES CHECKPOINT_NAMES DICTIONARY_NAME ENCODER HEAD LAYER_NORM_EPSILON "
        "MASK_SYMBOL MAX_REL_POS PAD_ID REL_POS_BINS SPECIAL_SYMBOLS convert_fairseq "
        "read_dictionary"
    ),
    "keras_tupe.convert.huggingface": (
        "ACTIVATIONS MAX_PREPROCESSOR_LENGTH POSITION_EMBEDDING_TYPES SPECIAL_TOKENS "
        "WEIGHT_FILES backbone_settings build_model checkpoint_values convert_huggingface "
        "read_source read_tensors read_vocabulary tokenizer_settings weights_file"
    ),
    "keras_tupe.convert.torch_files": "LEGACY_MAGIC_NUMBER TorchFileError UnknownObject load_torch_file",
    "keras_tupe.data.corpus": "TFDS_PREFIX check_utf8 line_batches line_dataset",
    "keras_tupe.data.glue": (
        "GLUE_TASKS GlueExamples GlueTask UNLABELLED get_task glue_dataset load_glue logger "
        "longest_packed_length pack_inputs"
    ),
    "keras_tupe.data.masking": "SPECIAL_TOKENS UNSELECTABLE_IDS check_rate mask_batch mask_selection_length",
    "keras_tupe.data.network": "DOWNLOAD_HOST require_network",
    "keras_tupe.data.packing": "pack_segments ragged_ids special_ids",
    "keras_tupe.data.pretraining": "MIN_SEQUENCE_LENGTH UNSELECTABLE_TOKENS mlm_dataset packed_sequences",
    "keras_tupe.data.sharding": "shard_corpus",
    "keras_tupe.data.shards": (
        "FORMAT_VERSION MANIFEST MaskedLMShards ShardError ShardSequences "
        "UINT16_VOCABULARY_LIMIT VOCABULARY file_sha256 read_manifest shard_dtype shard_name "
        "write_shard_folder"
    ),
    "keras_tupe.data.squad": (
        "ArticleSplit INPUT_NAMES SPLITS SPLIT_LABEL SquadFeatures TFDS_NAME "
        "WordPieceWithOffsets featurize load_squad logger postprocess split_articles "
        "squad_dataset"
    ),
    "keras_tupe.data.vocabulary": "check_vocabulary load_tokenizer train_vocabulary vocabulary_fingerprint",
    "keras_tupe.export.classifier": "classifier_module export_classifier",
    "keras_tupe.export.encoder": "encoder_input_spec encoder_module export_encoder flatten_outputs",
    "keras_tupe.export.preprocessor": "MAX_SEGMENTS export_preprocessor preprocessor_module",
    "keras_tupe.export.saved_model_cli": "main",
    "keras_tupe.export.tfhub_names": "ENCODER_INPUTS KERAS_HUB_TO_TFHUB TFHUB_TO_KERAS_HUB from_tfhub to_tfhub",
    "keras_tupe.export.versions": "existing_versions next_version write_version",
    "keras_tupe.finetuning.glue": (
        "BATCH_PAD_MULTIPLE FinetuneConfig PAPER_LEARNING_RATES PAPER_SEEDS SHORT_TASKS "
        "TASK_SETTINGS check_task_settings compiled_lengths finetune_glue paper_epochs "
        "run_protocol"
    ),
    "keras_tupe.finetuning.loading": (
        "CLASSIFIER_FILE CLASSIFIER_INFO default_vocabulary load_backbone load_classifier "
        "load_matching_tokenizer save_classifier unfinished_run"
    ),
    "keras_tupe.finetuning.squad": "SquadConfig finetune_squad run_squad_protocol",
    "keras_tupe.finetuning.summary": (
        "append_result check_selection chosen_learning_rate protocol_rates protocol_runs "
        "protocol_size read_results run_number runs_to_do summarize write_tables"
    ),
    "keras_tupe.folders": "first_missing made_folder",
    "keras_tupe.hub": "ENCODER_OUTPUTS SavedModelEncoder load_encoder load_saved_model",
    "keras_tupe.layers.bidirectional_alibi_bias": "BidirectionalAlibiBias alibi_slopes",
    "keras_tupe.layers.cls_reset": "CLS_RESET_STYLES ClsReset reset_cls_buckets reset_cls_from_reserved_rows",
    "keras_tupe.layers.disentangled_attention": "DisentangledAttention deberta_log_bucket_position disentangled_index",
    "keras_tupe.layers.disentangled_relative_embedding": "DisentangledRelativeEmbedding",
    "keras_tupe.layers.positional_attention_base": "PositionalAttentionBase",
    "keras_tupe.layers.qkr_multiplicative_attention": (
        "METHOD3_CHUNK_ELEMENTS METHOD4_BLOCK_SIZE METHODS QKRMultiplicativeAttention "
        "clipped_relative_positions method3_chunk_size method3_logits relative_products"
    ),
    "keras_tupe.layers.relative_bucket_bias": "RelativeBucketBias t5_relative_position_bucket",
    "keras_tupe.layers.rotary_positional_attention": "RotaryPositionalAttention check_rotary_head_dim",
    "keras_tupe.layers.transformer_encoder_block": "RELATIVE_METHODS TransformerEncoderBlock UNFUSABLE_METHODS",
    "keras_tupe.layers.untied_positional_attention": (
        "ATTENTION_IMPLEMENTATIONS UntiedPositionalAttention check_attention_implementation "
        "flash_attention_setting"
    ),
    "keras_tupe.layers.untied_positional_correlation": "OUTPUT_MODES UntiedPositionalCorrelation",
    "keras_tupe.layers.utils": (
        "Float32BiasCallMixin INITIALIZATION MASK_NEGATIVE attention_mask_to_bias "
        "check_sequence_length clone_initializer head_dim length_error_message mask_negative "
        "relative_positions"
    ),
    "keras_tupe.metrics": (
        "GLUE_METRICS accuracy exact_match_score f1 f1_score glue_metrics glue_score "
        "glue_score_metric matthews_corrcoef normalize_answer pearson spearman squad_evaluate"
    ),
    "keras_tupe.models.conversion": "add_relative_method4 from_keras_hub_bert keras_hub_inputs",
    "keras_tupe.models.preset_folders": (
        "REGISTERED_BACKBONE VOCABULARY_ASSET check_backbone_vocabulary_size "
        "check_preset_folder check_vocabulary_size classproperty is_preset_folder "
        "preset_sequence_length refuse_overwrite"
    ),
    "keras_tupe.models.presets": "PRESETS SIZES VARIANTS preset_description",
    "keras_tupe.models.string_inputs": "TextPreprocessorMixin check_string_inputs check_text_batch",
    "keras_tupe.models.task": "ReplicaXLAStep load_saved_model without_training_state",
    "keras_tupe.models.tupe_backbone": (
        "ABSOLUTE_CORRELATIONS ABSOLUTE_POSITIONS BEYOND_CORRELATIONS "
        "BEYOND_RELATIVE_POSITIONS INPUT_NAMES RELATIVE_POSITIONS TupeBackbone "
        "absolute_length_limit"
    ),
    "keras_tupe.models.tupe_bpe_tokenizer": (
        "BPE_CODES_ASSET BPE_SEPARATOR FAIRSEQ_SPECIAL_TOKENS MASK_TOKEN TupeBpeTokenizer "
        "VOCABULARY_ASSET apply_bpe parse_bpe_codes read_bpe_codes read_fairseq_dictionary"
    ),
    "keras_tupe.models.tupe_masked_lm": "TupeMaskedLM",
    "keras_tupe.models.tupe_masked_lm_preprocessor": "TupeMaskedLMPreprocessor default_mask_selection_length",
    "keras_tupe.models.tupe_span_qa": "SplitSpanLogits TupeSpanQA",
    "keras_tupe.models.tupe_span_qa_preprocessor": "TupeSpanQAPreprocessor",
    "keras_tupe.models.tupe_text_classifier": "TupeTextClassifier",
    "keras_tupe.models.tupe_text_classifier_preprocessor": "TupeTextClassifierPreprocessor",
    "keras_tupe.models.tupe_tokenizer": "TupeTokenizer",
    "keras_tupe.optimization": (
        "AdamW AggregatedClippingMixin LinearWarmupLinearDecay clip_by_global_norm "
        "create_optimizer decay_exclusions"
    ),
    "keras_tupe.pretraining": (
        "KerasDataParallel NoStrategy PRECISIONS PRESET_DIR PretrainConfig PretrainError "
        "RESUME_FREE_FIELDS RUN_CONFIG STRATEGIES console_command make_strategy "
        "prepare_run_dir pretrain validate versions write_preset"
    ),
    "keras_tupe.progress": "Heartbeat",
}


@pytest.mark.parametrize("module", sorted(PUBLIC_AT_F57B674))
def test_every_public_name_of_f57b674_still_imports(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        imported = importlib.import_module(module)
        missing = [name for name in PUBLIC_AT_F57B674[module].split()
                   if not hasattr(imported, name)]
    assert missing == [], f"{module} no longer has {missing}"


def test_a_deprecated_name_warns_once_at_the_line_that_called_it(tmp_path):
    """`keras_tupe.deprecation.warn_deprecated`'s stack levels, through a function, a class
    and a helper a shim shares: the warning names this file, not the library's."""
    import numpy as np

    from keras_tupe.data import glue, squad
    from keras_tupe.finetuning import summary

    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("[PAD]\n[CLS]\n[SEP]\n[UNK]\n[MASK]\nthe\n")
    examples = glue.GlueExamples(["the"], None, np.array([0]), "sst2", "train")
    tokenizer = squad.WordPieceWithOffsets  # a class: the warning comes from its __init__
    calls = [lambda: summary.protocol_size([], ["rte"], [1e-4], [0]),
             lambda: tokenizer(vocabulary),
             lambda: glue.longest_packed_length(tokenizer(vocabulary).tokenizer, examples)]
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        ours = [w for w in caught if "will be removed in the next release" in str(w.message)]
        assert [w.filename for w in ours][-1:] == [__file__], [(w.filename, str(w.message))
                                                               for w in ours]
