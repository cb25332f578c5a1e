#!/bin/bash
# DeepSpeed-Chat's step-1 main.py (published/, unchanged) launched on the tests' tiny Llama with
# OPT's module name (its default): written for the tests, run from tests/sources/native/launch.
deepspeed --num_gpus 1 published/dschat/training/step1_supervised_finetuning/main.py \
   --model_name_or_path seed/tiny-llama \
   --per_device_train_batch_size 1 \
   --max_seq_len 128 \
   --lora_dim 8 --lora_module_name decoder.layers. --only_optimize_lora \
   --zero_stage 2 \
   --deepspeed \
   --output_dir out
