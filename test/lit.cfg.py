# lit configuration of zeroc's IR and command-line tests.
import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "zeroc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.zeroc_obj_root, "test")
config.excludes = ["Inputs", "Unit", "CMakeLists.txt", "lit.cfg.py",
                   "lit.site.cfg.py"]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

config.substitutions.append(("%examples", os.path.join(config.zeroc_src_root, "examples")))

tools = ["zeroc", "zeroc-opt", "zerorun"]
llvm_config.add_tool_substitutions(tools, [config.zeroc_tools_dir])
