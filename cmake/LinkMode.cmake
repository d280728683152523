# How attnc links MLIR and LLVM.
#
# Debian's MLIR static archives name the shared libMLIR/libLLVM in their link
# interfaces, so a "static" binary would load a second copy of MLIR. We take
# those names out; with ATTNC_FULL_STATIC the LLVM component archives replace
# libLLVM.so (attached to MLIRSupport so that single-pass ld sees them after
# every MLIR archive).

get_property(_attnc_mlir_libs GLOBAL PROPERTY MLIR_ALL_LIBS)
set(_attnc_drop MLIR)
if(ATTNC_FULL_STATIC)
  list(APPEND _attnc_drop LLVM)
endif()
foreach(t IN LISTS _attnc_mlir_libs)
  if(TARGET ${t})
    get_target_property(_deps ${t} INTERFACE_LINK_LIBRARIES)
    if(_deps)
      list(REMOVE_ITEM _deps ${_attnc_drop})
      set_target_properties(${t} PROPERTIES INTERFACE_LINK_LIBRARIES "${_deps}")
    endif()
  endif()
endforeach()

if(ATTNC_FULL_STATIC)
  llvm_map_components_to_libnames(_attnc_llvm_libs Support Demangle Core
    BinaryFormat BitReader BitWriter AsmParser IRReader Linker TargetParser
    FrontendOpenMP FrontendOffloading FrontendHLSL Passes OrcJIT ExecutionEngine JITLink PerfJITEvents native)
  set_property(TARGET MLIRSupport APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${_attnc_llvm_libs})
  add_link_options(-Wl,--as-needed)
endif()
