# Install rules and Debian packages (CPack), included from the top-level
# CMakeLists.txt once every target exists.
#
#   cmake --install build --prefix /usr       # everything
#   cd build && cpack -G DEB                   # ferryd, ferry-console, libferry-client-dev
#
# Components: `ferryd` (the broker and ferryctl, the systemd unit, an
# example config, Prometheus config and alert rules, Grafana dashboards),
# `console` (ferry-console), `dev` (the client library: static libraries,
# public headers under include/ferry/, the CMake package config Ferry).
include(CMakePackageConfigHelpers)

set(FERRY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Ferry)

# -- programs ------------------------------------------------------------------
install(TARGETS ferryd ferryctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT ferryd)
if(TARGET ferry-console)
  install(TARGETS ferry-console RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    COMPONENT console)
endif()

# The systemd unit names ferryd where this install puts it (the prefix is
# known only at install time: cmake --install --prefix, cpack's /usr).
install(CODE "
  file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/ferryd.service\" unit)
  string(REPLACE \"/usr/local/bin/ferryd\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/ferryd\" unit \"\${unit}\")
  file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/ferryd.service\" \"\${unit}\")
  message(STATUS \"Installing: \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/ferryd.service\")
" COMPONENT ferryd)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/ferryd.conf.example
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT ferryd)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/prometheus/prometheus.yml
  ${PROJECT_SOURCE_DIR}/deploy/prometheus/alerts.yml
  DESTINATION ${CMAKE_INSTALL_DATADIR}/ferry/prometheus COMPONENT ferryd)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/grafana/ferry-overview.json
  ${PROJECT_SOURCE_DIR}/deploy/grafana/ferry-consumers.json
  DESTINATION ${CMAKE_INSTALL_DATADIR}/ferry/grafana COMPONENT ferryd)

# -- the client library ----------------------------------------------------------
install(TARGETS ferry_core ferry_protocol ferry_security ferry_client EXPORT FerryTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# Public headers: the client's, the protocol's and the broker core's they
# include, under include/ferry/ with their paths in the tree (so
# #include <actors/client/producer.hpp> works the same in and out of it).
set(ferry_public_headers
  actors/client/admin.hpp actors/client/client_connection.hpp
  actors/client/consumer.hpp actors/client/leader_links.hpp
  actors/client/producer.hpp actors/client/queue_consumer.hpp
  actors/client/session.hpp actors/client/stream_dlq.hpp actors/client/tls.hpp
  actors/protocol/interfaces.hpp
  broker/messages.hpp broker/model.hpp broker/raft_types.hpp broker/error.hpp
  broker/record_batch.hpp broker/compression.hpp broker/crc32c.hpp
  broker/varint.hpp broker/big_endian.hpp broker/partitioner.hpp broker/topic_config.hpp
  broker/retry_policy.hpp broker/lease_table.hpp)
foreach(h ${ferry_public_headers})
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ferry/${dir} COMPONENT dev)
endforeach()
install(EXPORT FerryTargets NAMESPACE Ferry:: DESTINATION ${FERRY_CMAKE_DIR}
  COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/deploy/FerryConfig.cmake.in
  ${PROJECT_BINARY_DIR}/deploy/FerryConfig.cmake INSTALL_DESTINATION ${FERRY_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/deploy/FerryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/deploy/FerryConfig.cmake
  ${PROJECT_BINARY_DIR}/deploy/FerryConfigVersion.cmake
  DESTINATION ${FERRY_CMAKE_DIR} COMPONENT dev)

# -- Debian packages ---------------------------------------------------------------
set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "Ferry")
set(CPACK_PACKAGE_CONTACT "Ferry maintainers <ferry@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Ferry: a partitioned, replicated message queue")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_COMPONENTS_ALL ferryd dev)
set(CPACK_DEBIAN_FERRYD_PACKAGE_NAME ferryd)
set(CPACK_COMPONENT_FERRYD_DESCRIPTION "Ferry broker node (ferryd) and the ferryctl CLI")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libferry-client-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DESCRIPTION "Ferry's CAF-native client library (static), headers and CMake config")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libcaf-dev, liblz4-dev, libzstd-dev, zlib1g-dev, pkg-config")
if(TARGET ferry-console)
  list(APPEND CPACK_COMPONENTS_ALL console)
  set(CPACK_DEBIAN_CONSOLE_PACKAGE_NAME ferry-console)
  set(CPACK_COMPONENT_CONSOLE_DESCRIPTION "Ferry's Qt desktop console")
endif()
include(CPack)
